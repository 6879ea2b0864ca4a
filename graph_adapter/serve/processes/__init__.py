"""The server's child processes: :mod:`.program` runs the artifact's program
(:class:`~graph_adapter.serve.processes.program.ProcessPredictor`), :mod:`.decoder` reads
large request bodies (:class:`~graph_adapter.serve.processes.decoder.DecodeProcess`);
:mod:`.pipes` is the message format between them and the server (JSON headers, raw
arrays, no pickle). Each child exits when its input pipe closes."""
