-- wrk's script for benchmarks/bench_serve.py (--only wrk): POST one fixed request to
-- /predict and check every response: status 200 and a body equal, byte for byte, to the
-- expected one (bench_serve.py checked that one against in-process Predictor.predict).
--
--   GA_WRK_BODY=request.json GA_WRK_EXPECT=answer.json GA_WRK_BAD=first_bad.txt \
--     wrk -t2 -c8 -d10s --latency -s benchmarks/serve_wrk.lua http://127.0.0.1:PORT/predict
--
-- done() prints one line: "wrk-check: responses=N non200=N mismatches=N"; the first
-- response that fails the check is written to GA_WRK_BAD (status, then body).

local function slurp(path)
  local f = assert(io.open(path, "rb"), "cannot open " .. tostring(path))
  local text = f:read("*a")
  f:close()
  return text
end

wrk.method = "POST"
wrk.body = slurp(os.getenv("GA_WRK_BODY"))
wrk.headers["Content-Type"] = "application/json"
local expected = slurp(os.getenv("GA_WRK_EXPECT"))
local bad_path = os.getenv("GA_WRK_BAD")

local threads = {}

function setup(thread)
  table.insert(threads, thread)
end

function init(args)
  responses, non200, mismatches, wrote = 0, 0, 0, false
end

local function keep(status, body)
  if wrote or not bad_path then return end
  wrote = true
  local f = io.open(bad_path .. "." .. tostring(os.time()) .. "." .. tostring(math.random(1e9)), "wb")
  if f then
    f:write(tostring(status), "\n", body or "")
    f:close()
  end
end

function response(status, headers, body)
  responses = responses + 1
  if status ~= 200 then
    non200 = non200 + 1
    keep(status, body)
  elseif body ~= expected then
    mismatches = mismatches + 1
    keep(status, body)
  end
end

function done(summary, latency, requests)
  local r, n, m = 0, 0, 0
  for _, t in ipairs(threads) do
    r = r + t:get("responses")
    n = n + t:get("non200")
    m = m + t:get("mismatches")
  end
  io.write(string.format("wrk-check: responses=%d non200=%d mismatches=%d\n", r, n, m))
end
