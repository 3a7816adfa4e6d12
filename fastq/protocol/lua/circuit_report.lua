#!lua flags=allow-oom
--! include args
-- circuit_report: what became of jobs of a circuit breaker's key, in order; opens the
-- circuit after `failures` in a row (no job of the key starts for open_ms), closes a
-- half-open one at a success, and opens it again at a failed probe, for twice as
-- long each time (up to MAX_PAUSE_MS).
--
-- KEYS[1] circuit  hash  f: failures in a row; open: ms (Redis' clock) until which
--                        no job of the key starts (absent: closed); level: opens in a
--                        row (each doubles the pause); probe: ms until which the job
--                        that probes a half-open circuit holds it
--
-- ARGV[1] failures  the failures in a row that open the circuit
-- ARGV[2] open_ms   how long it stays open the first time
-- ARGV[3] outcomes  's' (a success) and 'f' (a failure), one a job, in order
--
-- Returns {transition, pause_ms}: 'opened' and its pause, 'closed', or ''.
--
-- allow-oom: a few fields a key; jobs keep moving over maxmemory.

local MAX_PAUSE_MS = 600000  -- a pause doubles up to ten minutes
local KEEP_MS = 86400000     -- a closed circuit's count of failures lives a day

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local state = redis.call('HMGET', KEYS[1], 'f', 'open', 'level', 'probe')
local fails = tonumber(state[1]) or 0
local open = tonumber(state[2])
local level = tonumber(state[3]) or 0
local probe = tonumber(state[4]) or 0
local threshold = arg_int('circuit_report', 1, 'failures', 1)
local open_ms = arg_int('circuit_report', 2, 'open_ms', 1)
local outcomes = ARGV[3] or ''
local transition, pause = '', 0
for i = 1, #outcomes do
    local c = string.sub(outcomes, i, i)
    if c == 's' then
        fails = 0
        if open and now >= open then  -- half-open: a success closes it
            open, level, probe = nil, 0, 0
            transition = 'closed'
        end
    elseif c == 'f' then
        if open and now >= open then  -- half-open: the probe failed, open again, longer
            level = level + 1
            pause = math.min(open_ms * 2 ^ level, MAX_PAUSE_MS)
            open, probe, fails = now + pause, 0, 0
            transition = 'opened'
        elseif not open then
            fails = fails + 1
            if fails >= threshold then
                pause = open_ms
                open, level, probe, fails = now + pause, 0, 0, 0
                transition = 'opened'
            end
        end  -- open: a job that had started before it opened; nothing to learn
    else
        error('circuit_report: an outcome must be s or f, not ' .. c)
    end
end
if open then
    redis.call('HSET', KEYS[1], 'f', fails, 'open', open, 'level', level, 'probe', probe)
    redis.call('PEXPIRE', KEYS[1], open - now + KEEP_MS)
elseif fails > 0 then
    redis.call('HSET', KEYS[1], 'f', fails)
    redis.call('HDEL', KEYS[1], 'open', 'level', 'probe')
    redis.call('PEXPIRE', KEYS[1], KEEP_MS)
else
    redis.call('DEL', KEYS[1])
end
return {transition, pause}
