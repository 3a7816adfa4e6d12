#!lua
--! include many
--! include args
--! include groups
-- revive: put dead or broken jobs back in their queue, as new runs of the same ids.
-- Re-enqueueing a dead id does nothing (ids are idempotent), so a retry must take
-- the id out of the dead (or broken) set and queue its envelope in one call.
--
-- KEYS[1] jobs       hash   id -> envelope
-- KEYS[2] dead       zset   id -> time of death (ms)
-- KEYS[3] poison     hash   dead id -> why it died when no worker could say
-- KEYS[4] broken     hash   id -> why it could not run
-- KEYS[5] stalls     hash   id -> stall count
-- KEYS[6] ready      list   ids; producers LPUSH, workers pop the right end (the front)
-- KEYS[7] prio       zset   ids with a non-zero priority; score = -priority * 2^31 + seq
-- KEYS[8] stats      hash   counters (seq, revived)
-- KEYS[9] wake       list   at most one token; idle workers BLPOP it
-- KEYS[10] settings  hash   the queue's settings: groups = "1" once it had a grouped job
-- KEYS[11] group_ready zset the ready jobs of the queue's groups (lib/groups.lua)
-- KEYS[12] group_ring list  the groups with ready jobs
--
-- ARGV[1] section    'dead' or 'broken': where the ids are taken from
-- ARGV[2..] jobs     id, envelope, priority triples: the envelope to queue (the
--                    caller resets its attempts and error) and its priority
--
-- A job is revived only while it is still in that section and still has its
-- envelope (a broken id popped without one cannot run again); others are skipped.
-- A revived job is queued at the back (priority 0) or in prio (a grouped one, of a
-- queue that has had grouped jobs, at the back of its group), with its stall
-- count reset; it keeps no tags or unique lock (they ended with it). Returns the
-- number of jobs revived.

local section = ARGV[1]
if section ~= 'dead' and section ~= 'broken' then
    error('revive: section (ARGV[1]) must be dead or broken, not ' .. tostring(section))
end
if (#ARGV - 1) % 3 ~= 0 then
    error('revive: jobs (ARGV[2..]) must be id, envelope, priority triples')
end
for i = 4, #ARGV, 3 do
    arg_int('revive', i, 'priority')
end

local ids, envs, prios = {}, {}, {}
for i = 2, #ARGV, 3 do
    local id = ARGV[i]
    local present
    if section == 'dead' then
        present = redis.call('ZSCORE', KEYS[2], id)
    else
        present = redis.call('HEXISTS', KEYS[4], id) == 1
    end
    if present and redis.call('HEXISTS', KEYS[1], id) == 1 then
        ids[#ids + 1] = id
        envs[#envs + 1] = ARGV[i + 1]
        prios[#prios + 1] = tonumber(ARGV[i + 2])
    end
end
if #ids == 0 then
    return 0
end

if section == 'dead' then
    call_many('ZREM', KEYS[2], ids)
    call_many('HDEL', KEYS[3], ids)
else
    call_many('HDEL', KEYS[4], ids)
end
call_many('HDEL', KEYS[5], ids)
local gk = nil
if redis.call('HGET', KEYS[10], 'groups') == '1' then
    gk = {ready = KEYS[11], ring = KEYS[12], stats = KEYS[8]}
end
for k = 1, #ids do
    redis.call('HSET', KEYS[1], ids[k], envs[k])
    local g = gk and envelope_group(envs[k])
    if g then
        group_push_back(gk, g, prios[k], {ids[k]})
    elseif prios[k] ~= 0 then
        local seq = redis.call('HINCRBY', KEYS[8], 'seq', 1)
        redis.call('ZADD', KEYS[7], string.format('%.17g', -prios[k] * 2147483648 + seq), ids[k])
    else
        redis.call('LPUSH', KEYS[6], ids[k])
    end
end
redis.call('HINCRBY', KEYS[8], 'revived', #ids)
if redis.call('LLEN', KEYS[9]) == 0 then
    redis.call('RPUSH', KEYS[9], 1)
end
return #ids
