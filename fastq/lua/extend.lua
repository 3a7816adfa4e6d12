-- extend: push back the lease deadline of every job one worker holds, so a
-- long job is never handed to another worker while its own is alive.
--
-- KEYS[1] inflight   zset   id -> lease deadline (ms)
-- KEYS[2] lease      hash   id -> worker id
-- KEYS[3] held       set    ids this worker holds
--
-- ARGV[1] worker id
-- ARGV[2] lease_ms   new deadline = now + lease_ms
--
-- Only leases the worker still holds are extended. Returns how many.

local worker = ARGV[1]
local lease_ms = tonumber(ARGV[2])
-- bounded by what one worker can prefetch
local ids = redis.call('SMEMBERS', KEYS[3])
if #ids == 0 then
    return 0
end
local t = redis.call('TIME')
local deadline = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + lease_ms
local owners = redis.call('HMGET', KEYS[2], unpack(ids))
local zargs = {}
for k = 1, #ids do
    if owners[k] == worker then
        zargs[#zargs + 1] = deadline
        zargs[#zargs + 1] = ids[k]
    end
end
if #zargs == 0 then
    return 0
end
-- XX: never re-create a lease that an ack or a reaper just removed
redis.call('ZADD', KEYS[1], 'XX', unpack(zargs))
redis.call('PEXPIRE', KEYS[3], lease_ms * 2)
return #zargs / 2
