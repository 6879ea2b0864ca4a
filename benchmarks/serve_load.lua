-- A wrk load test of `graph-adapter serve` that checks every answer, not only its status.
--
-- Each request posts one graph whose expected prediction the script knows (the stand-in
-- predictor of tests/serve/_http.py predicts the sum of x), and names it in X-Request-Id,
-- which the server echoes on its answer: the answer is matched to its request by that id,
-- whatever order the connections' answers come in. At the end the script prints one JSON
-- line: answers right, wrong, not 200, wrk's socket errors, and the latency percentiles.
--
--   wrk -t2 -c16 -d10s -s benchmarks/serve_load.lua http://127.0.0.1:8000
--
-- (tests/serve/test_http_wrk.py runs it against a server on 127.0.0.1, in CI's extended
-- step.)

local threads = {}

function setup(thread)
   thread:set("tid", #threads)
   table.insert(threads, thread)
end

function init(args)
   ok, wrong, not_200, n = 0, 0, 0, 0
   first_wrong = ""
end

function request()
   n = n + 1
   local v = (tid * 7919 + n) % 1000
   local body = '{"graphs": [{"x": [[' .. v .. ', 1.5]]}]}'
   return wrk.format("POST", "/predict",
                     {["Content-Type"] = "application/json", ["X-Request-Id"] = "v" .. v},
                     body)
end

function response(status, headers, body)
   if status ~= 200 then
      not_200 = not_200 + 1
      return
   end
   local rid = headers["x-request-id"] or headers["X-Request-Id"] or "v-1"
   local v = tonumber(string.sub(rid, 2)) or -1
   local want = '{"predictions":[[' .. string.format("%.1f", v + 1.5) .. ']]}'
   if body == want then
      ok = ok + 1
   else
      wrong = wrong + 1
      if first_wrong == "" then first_wrong = rid .. " " .. body end
   end
end

function done(summary, latency, requests)
   local right, bad, refused, example = 0, 0, 0, ""
   for _, t in ipairs(threads) do
      right = right + t:get("ok")
      bad = bad + t:get("wrong")
      refused = refused + t:get("not_200")
      if example == "" then example = t:get("first_wrong") end
   end
   local e = summary.errors
   io.write(string.format(
      '{"ok": %d, "wrong": %d, "not_200": %d, "errors": {"connect": %d, "read": %d, ' ..
      '"write": %d, "status": %d, "timeout": %d}, "requests": %d, "seconds": %.3f, ' ..
      '"p50_ms": %.3f, "p99_ms": %.3f, "first_wrong": %q}\n',
      right, bad, refused, e.connect, e.read, e.write, e.status, e.timeout,
      summary.requests, summary.duration / 1e6, latency:percentile(50) / 1e3,
      latency:percentile(99) / 1e3, example))
end
