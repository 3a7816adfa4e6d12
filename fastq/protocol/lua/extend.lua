#!lua flags=allow-oom
--! include args
--! include epoch
-- extend: push back the lease deadline of every job one worker holds, so a
-- long job is never handed to another worker while its own is alive.
--
-- KEYS[1] leases     zset   worker id -> deadline (ms) of every lease it holds
-- KEYS[2] held       set    ids this worker holds leases on
-- KEYS[3] epoch      string the worker's epoch on this queue (lib/epoch.lua)
--
-- ARGV[1] worker_id
-- ARGV[2] lease_ms   new deadline = now + lease_ms
-- ARGV[3] epoch      the worker's epoch: an older one than recorded is refused
--                    (a STALE error), the lease left as it is
--
-- Returns how many jobs the extended lease covers (0 when the worker holds none).
-- allow-oom: a heartbeat must go on while Redis is over maxmemory.

local worker = arg_worker('extend', 1)
local lease_ms = arg_int('extend', 2, 'lease_ms', 1)
local epoch = arg_int('extend', 3, 'epoch', 0)
local refused = epoch_refused(KEYS[3], epoch)
if refused then
    return refused
end
local t = redis.call('TIME')
local deadline = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + lease_ms
-- never re-create a lease that a release or a reaper just dropped: the next
-- claim starts a new one
if not redis.call('ZSCORE', KEYS[1], worker) then
    return 0
end
redis.call('ZADD', KEYS[1], 'GT', deadline, worker)
-- less the sentinel member
return math.max(redis.call('SCARD', KEYS[2]) - 1, 0)
