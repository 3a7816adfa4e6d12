#!lua flags=allow-oom
--! include args
-- circuit_check: may a job of a circuit breaker's key start? (A job's circuit_key,
-- formatted from its arguments: "smtp:{host}"; one circuit for every worker of every
-- host, circuit_report.lua keeps it.)
--
-- KEYS[1] circuit  hash  f: failures in a row; open: ms (Redis' clock) until which
--                        no job of the key starts (absent: closed); level: opens in a
--                        row (each doubles the pause); probe: ms until which the job
--                        that probes a half-open circuit holds it
--
-- ARGV[1] probe_ms  how long a job probing a half-open circuit holds it
-- ARGV[2] open_ms   the circuit's first pause: while another job probes, a job
--                   waits this long at most before it looks again
--
-- Returns 0: the job may start (the circuit is closed, or half-open and this job
-- probes it); else the ms it waits (the worker reschedules it, no attempt counted).
--
-- allow-oom: a field of a few bytes; jobs keep moving over maxmemory.

local probe_ms = arg_int('circuit_check', 1, 'probe_ms', 1)
local open_ms = arg_int('circuit_check', 2, 'open_ms', 1)
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local state = redis.call('HMGET', KEYS[1], 'open', 'probe')
local open = tonumber(state[1])
if not open then
    return 0
end
if now < open then
    return open - now
end
local probe = tonumber(state[2]) or 0
if probe > now then  -- half-open, and another job probes it
    return math.min(probe - now, open_ms)
end
redis.call('HSET', KEYS[1], 'probe', now + probe_ms)
return 0
