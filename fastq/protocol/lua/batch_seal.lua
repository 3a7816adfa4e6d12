#!lua
--! include args
--! include batches
-- batch_seal: open, read, seal or drop one queue's share of a batch (lib/batches.lua).
--
-- KEYS[1] batches     hash   batch id -> this queue's share of it
-- KEYS[2] batches_due set    batch ids whose sealed share has ended
--
-- ARGV[1] batch      the batch id
-- ARGV[2] mode       'open': made if there is none (the queue joined the batch: its
--                    jobs may be enqueued into it now); 'read': as it is; 'seal': its
--                    batch closed, no enqueue joins it
--                    now; 'cancel': sealed, its batch cancelled; 'drop': its batch
--                    ended and told: the share goes
--
-- Returns the share, 'enq,done,dead,cancelled,failed,flag' ('' if there is none),
-- as it is after the call (before it, for 'drop'). Sealing one never joined writes
-- an empty sealed share: an enqueue that comes after is refused.

local batch, mode = ARGV[1], ARGV[2]
if mode ~= 'open' and mode ~= 'read' and mode ~= 'seal' and mode ~= 'cancel'
        and mode ~= 'drop' then
    error("batch_seal: mode (ARGV[2]) must be 'open', 'read', 'seal', 'cancel' or 'drop', "
        .. 'not ' .. tostring(mode))
end
local text = redis.call('HGET', KEYS[1], batch)
if mode == 'open' then
    if not text then
        text = '0,0,0,0,0,'
        redis.call('HSET', KEYS[1], batch, text)
    end
    return text
end
if mode == 'read' then
    return text or ''
end
if mode == 'drop' then
    redis.call('HDEL', KEYS[1], batch)
    redis.call('SREM', KEYS[2], batch)
    return text or ''
end
local s = share_of(text) or {0, 0, 0, 0, 0, ''}
if mode == 'cancel' then
    s[6] = 'x'
elseif s[6] == '' then
    s[6] = 'c'
end
redis.call('HSET', KEYS[1], batch, share_text(s))
if share_ended(s) then
    redis.call('SADD', KEYS[2], batch)
end
return share_text(s)
