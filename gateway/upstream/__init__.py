"""Hop 4: the engine client. `client` (EngineClient: /generate, /abort_request, /tokenize and
the control calls, with retries and an injectable transport), `stream` (EngineStream: the
streamed /generate body as events, refusals and deadlines) and `wire` (the lean HTTP/1.1 client
generation uses unless `upstream.client: httpx`)."""
