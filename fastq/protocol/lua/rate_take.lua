#!lua flags=allow-oom
--! include args
--! include gcra
-- rate_take: reserve the next token of a per-key rate limit (a job's rate_key) for
-- a job about to start.
--
-- KEYS[1] rate_state  string  the GCRA state of one key: 'tat rate/period_ms/burst'
--                             (tat in µs), the limit it was taken under; it expires
--                             when the key's bucket is full again (then it equals
--                             no key). A state of another limit (the key was given a
--                             rate of its own, or lost it) is dropped: the key starts
--                             afresh at its new rate, as a queue's limit set does.
--
-- ARGV[1] rate       tokens per period
-- ARGV[2] period_ms  the period
-- ARGV[3] burst      tokens at once after a quiet spell
--
-- Returns 0: the token is for now, the job may start; else the ms until the token
-- reserved for it is due: the worker reschedules the job to then, and it starts
-- then without taking another. Each job waits once, in its own slot, however many
-- share the key (a "come back at the next token" would make every waiting job
-- come back at every token).
--
-- allow-oom: a state of a few bytes that expires; jobs keep moving over maxmemory.

local rate = arg_int('rate_take', 1, 'rate', 1)
local period_ms = arg_int('rate_take', 2, 'period_ms', 1)
local burst = arg_int('rate_take', 3, 'burst', 1)

local t = redis.call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval_us = period_ms * 1000 / rate
local limit = ARGV[1] .. '/' .. ARGV[2] .. '/' .. ARGV[3]
local saved = redis.call('GET', KEYS[1])
local saved_tat
if saved then
    local tat, saved_limit = string.match(saved, '^(%d+) (%S+)$')
    if saved_limit == limit then
        saved_tat = tonumber(tat)
    elseif not tat then
        saved_tat = tonumber(saved)  -- a state of an older worker's: the same limit
    end
end
local tokens, tat_us = gcra_open(saved_tat, now_us, interval_us, burst)
local state = gcra_state(tat_us, interval_us, 1)
redis.call('SET', KEYS[1], state .. ' ' .. limit, 'PX',
    math.ceil((tonumber(state) - now_us) / 1000) + 1)
if tokens >= 1 then
    return 0
end
return gcra_due_ms(tat_us, interval_us, burst) - math.floor(now_us / 1000)
