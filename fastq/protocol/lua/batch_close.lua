#!lua
--! include args
-- batch_close: close a batch (no job nor child joins it from now), or cancel it
-- (closed too: its waiting jobs are then cancelled, share by share, by the caller).
--
-- KEYS[1] batch      hash   the batch (batch_open.lua)
--
-- ARGV[1] cancel     1: cancel it, 0: close it
--
-- Returns {state, cancelled, member, ...}: its state after the call ('' for no such
-- batch), 1 if it is cancelled, and every member ('q:<queue>', 'k:<batch>'), whose
-- shares the caller seals (batch_seal.lua) and reports (batch_settle.lua). Closing
-- twice is closing once; an ended batch is left as it is.

local cancel = arg_int('batch_close', 1, 'cancel', 0)
local st = redis.call('HGET', KEYS[1], 'st')
if not st then
    return {''}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if st == 'open' then
    st = 'closed'
    redis.call('HSET', KEYS[1], 'st', st, 'tc', now)
end
if cancel == 1 and st == 'closed' and redis.call('HEXISTS', KEYS[1], 'cx') == 0 then
    redis.call('HSET', KEYS[1], 'cx', now)
end
local out = {st, redis.call('HEXISTS', KEYS[1], 'cx')}
local fields = redis.call('HKEYS', KEYS[1])
for i = 1, #fields do
    local f = fields[i]
    if string.find(f, '^[qk]:') then
        out[#out + 1] = f
    end
end
return out
