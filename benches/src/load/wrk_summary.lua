-- wrk script of `switchyard-load wrk`: sets the request method (first argument after `--`, GET without one)
-- and body (second argument, none without one), and prints one line the load generator parses: counts,
-- error kinds and latency percentiles in µs.
-- wrk calls init before it formats the request, so the method set here is the one sent.
init = function(args)
  if args[1] ~= nil and args[1] ~= "" then
    wrk.method = args[1]
  end
  if args[2] ~= nil and args[2] ~= "" then
    wrk.body = args[2]
  end
  -- A bodiless POST still says its length, so no server waits for a body.
  if wrk.method ~= "GET" and wrk.method ~= "HEAD" and wrk.body == nil then
    wrk.headers["Content-Length"] = "0"
  end
end

done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "switchyard-wrk requests=%d duration_us=%d connect=%d read=%d write=%d status=%d timeout=%d " ..
    "p50_us=%d p90_us=%d p99_us=%d max_us=%d\n",
    summary.requests, summary.duration, e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max))
end
