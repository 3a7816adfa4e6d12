#!lua flags=allow-oom
--! include args
-- rate_rest: rest one key of a per-key rate limit (a job's rate_key): no token of it
-- is due before rest_ms from now (a job said its resource asked to slow down:
-- Retry(slow_key=True)). Tokens already reserved keep their slots.
--
-- KEYS[1] rate_state  string  the key's GCRA state (rate_take.lua)
--
-- ARGV[1] rest_ms     how long the key rests, its burst's span included (the caller
--                     adds (burst - 1) intervals: with burst B, tokens come B - 1
--                     intervals before the state's time)
--
-- Returns 1 if it moved the key's state on; 0 if the key rested that long already.
-- The state it writes names no limit: whatever limit the key has next takes it.
--
-- allow-oom: a state of a few bytes that expires.

local rest_ms = arg_int('rate_rest', 1, 'rest_ms', 1)
local t = redis.call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local until_us = now_us + rest_ms * 1000
local saved = redis.call('GET', KEYS[1])
local tat = saved and tonumber(string.match(saved, '^(%d+)'))
if tat and tat >= until_us then
    return 0
end
redis.call('SET', KEYS[1], string.format('%.0f', until_us), 'PX', rest_ms + 1)
return 1
