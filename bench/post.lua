-- wrk script: every request is POST with the body read from the file named by BENCH_BODY_FILE.
-- BENCH_DELAY_MS > 0 makes each connection wait that many ms after a response before sending its
-- next request (wrk's `delay` hook; latency is timed from the write, so the wait is not counted):
-- the fixed-rate (half-load) run uses it as rate ≈ connections / (delay + latency).
local f = assert(io.open(assert(os.getenv("BENCH_BODY_FILE"), "BENCH_BODY_FILE not set"), "rb"))
wrk.method = "POST"
wrk.body = f:read("*a")
f:close()
wrk.headers["Content-Type"] = "application/json"

local d = tonumber(os.getenv("BENCH_DELAY_MS") or "")
if d and d > 0 then
  function delay()
    return d
  end
end

-- wrk --latency prints percentiles up to 99 only; the bench reads p99.9 from this line.
function done(summary, latency, requests)
  io.write(string.format("p99.9_us %d\n", latency:percentile(99.9)))
end
