#!lua flags=allow-oom
--! include many
--! include args
--! include links
--! include batches
--! include chains
--! include groups
-- purge: delete up to `limit` waiting jobs of one queue (their envelopes and
-- index entries), from the sections selected; one bounded call of a loop, so that
-- purging a queue of any size never blocks Redis for long.
--
-- KEYS[1]  ready      list   ids; the right end is the front
-- KEYS[2]  prio       zset   ids with a priority
-- KEYS[3]  scheduled  zset   id -> due time (ms)
-- KEYS[4]  sched_prio hash   scheduled id -> priority or 'r'
-- KEYS[5]  dead       zset   id -> time of death (ms)
-- KEYS[6]  poison     hash   dead id -> why it died
-- KEYS[7]  broken     hash   id -> why it could not run
-- KEYS[8]  jobs       hash   id -> envelope
-- KEYS[9]  stalls     hash   id -> stall count
-- KEYS[10] stats      hash   counters (purged)
-- KEYS[11] links      hash   id -> its tags and unique lock (lib/unique.lua)
-- KEYS[12] tagged     zset   "<tag>\n<id>" of live tagged jobs
-- KEYS[13] unique     hash   unique key -> the id holding its lock
-- KEYS[14] unique_exp zset   unique key -> when its lock's window ends (ms)
-- KEYS[15] batched    hash   id -> its batch (lib/batches.lua): a waiting job
--                            purged counts cancelled in its batch
-- KEYS[16] batches    hash   batch id -> this queue's share of it
-- KEYS[17] batches_due set   batch ids whose sealed share has ended
-- KEYS[18] chained    hash   id -> the rest of its chain: a job purged loses it
-- KEYS[19] group_ready zset  the ready jobs of the queue's groups (lib/groups.lua):
--                            ready jobs too
-- KEYS[20] group_ring list   the groups with ready jobs: a group purged empty leaves
--
-- ARGV[1] limit      ids to delete at most in this call (>= 1)
-- ARGV[2] ready      1: delete ready jobs (ready list and prio zset), 0: keep
-- ARGV[3] scheduled  1: delete scheduled jobs (delayed, retries in backoff), 0: keep
-- ARGV[4] dead       1: delete dead jobs, 0: keep
-- ARGV[5] broken     1: delete broken jobs, 0: keep
--
-- Returns {taken, deleted}: the ids taken from the sections (fewer than limit: the
-- selected sections are empty) and the jobs deleted among them. A cancelled job's
-- id stays in the ready list until popped (its cancel deleted the envelope and
-- counted it): taken, it is not a job deleted. Jobs held by workers (in flight) are in none of these
-- sections and are never touched: their ack finds them as usual. The tag entries
-- and unique locks of what is deleted go with it (a 'w' lock too: its job is gone).

local limit = arg_int('purge', 1, 'limit', 1)
if limit > 5000 then
    -- unpack() below is bounded by Lua's C stack (8000)
    error('purge: limit (ARGV[1]) must be <= 5000, not ' .. ARGV[1])
end
local names = {'limit', 'ready', 'scheduled', 'dead', 'broken'}
local sel = {}
for i = 2, 5 do
    sel[i] = arg_int('purge', i, names[i], 0)
    if sel[i] > 1 then
        error('purge: ARGV[' .. i .. '] must be 0 or 1, not ' .. ARGV[i])
    end
end

local ids = {}
local function take(list)
    for i = 1, #list do
        ids[#ids + 1] = list[i]
    end
end
-- the first `left` members of a zset, removed from it (and from `side`, a hash)
local function take_zset(key, side)
    local left = limit - #ids
    if left <= 0 then
        return
    end
    local got = redis.call('ZRANGE', key, 0, left - 1)
    if #got > 0 then
        call_many('ZREM', key, got)
        if side then
            call_many('HDEL', side, got)
        end
        take(got)
    end
end

if sel[2] == 1 then
    local popped = redis.call('RPOP', KEYS[1], limit)
    if popped then
        take(popped)
    end
    take_zset(KEYS[2], nil)
    local left = limit - #ids
    if left > 0 then
        local members = redis.call('ZRANGE', KEYS[19], 0, left - 1)
        if #members > 0 then
            redis.call('ZREM', KEYS[19], unpack(members))
            local emptied = {}
            for i = 1, #members do
                local g = string.match(members[i], '^([^\n]*)\n')
                ids[#ids + 1] = string.sub(members[i], #g + 2 + GROUP_ORDER_LEN)
                emptied[g] = true
            end
            -- a group is in the ring exactly while it has ready jobs
            for g in pairs(emptied) do
                local lo, hi = group_range(g)
                if #redis.call('ZRANGEBYLEX', KEYS[19], lo, hi, 'LIMIT', 0, 1) == 0 then
                    redis.call('LREM', KEYS[20], 0, g)
                end
            end
        end
    end
end
local queued = #ids  -- ids[1..queued] were ready: a cancelled one has no envelope
if sel[3] == 1 then
    take_zset(KEYS[3], KEYS[4])
end
if sel[4] == 1 then
    take_zset(KEYS[5], KEYS[6])
end
if sel[5] == 1 and #ids < limit then
    -- HRANDFIELD with a positive count: distinct fields, at most that many
    local got = redis.call('HRANDFIELD', KEYS[7], limit - #ids)
    if #got > 0 then
        call_many('HDEL', KEYS[7], got)
        take(got)
    end
end

if #ids == 0 then
    return {0, 0}
end
end_links({links = KEYS[11], tagged = KEYS[12], unique = KEYS[13], unique_exp = KEYS[14]}, ids,
    true)
end_batches({batched = KEYS[15], batches = KEYS[16], batches_due = KEYS[17]}, ids,
    BATCH_CANCELLED)
chain_drop({chained = KEYS[18]}, ids)
local deleted = #ids - queued
if queued > 0 then
    deleted = deleted + redis.call('HDEL', KEYS[8], unpack(ids, 1, queued))
end
if #ids > queued then
    redis.call('HDEL', KEYS[8], unpack(ids, queued + 1, #ids))
end
call_many('HDEL', KEYS[9], ids)
if deleted > 0 then
    redis.call('HINCRBY', KEYS[10], 'purged', deleted)
end
return {#ids, deleted}
