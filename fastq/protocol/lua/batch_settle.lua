#!lua
--! include args
--! include batches
-- batch_settle: tell a batch the latest counts of its members; the first call that
-- finds it closed and every member ended ends it, and every call from then on until
-- its callbacks are enqueued returns what to enqueue (with ids of the batch's own,
-- so that enqueueing them twice adds them once).
--
-- KEYS[1] batch      hash   the batch (batch_open.lua)
--
-- ARGV[1] keep_ms    how long an ended batch is kept (its status readable)
-- ARGV[2] fired      1: its callbacks are enqueued now: say so, and keep it keep_ms
-- ARGV[3..] reports  member, counts pairs: 'q:<queue>' and that queue's share
--                    ('enq,done,dead,cancelled,failed,flag', lib/batches.lua);
--                    'k:<batch>' and a child's final 'total,done,dead,cancelled,failed'
--
-- Counts only grow, so each is kept as the greater of what was told (a late report
-- never takes a count back), and a member never joined is ignored.
-- A batch has ended once it is closed, every queue's share is sealed with each job
-- it enqueued done, dead or cancelled, and every child batch has ended.
-- Returns {''}: no such batch; {'open'} or {'closed'}: not ended; {'fired'}: ended,
-- its callbacks enqueued; or {'fire', total, done, dead, cancelled, failed,
-- cancelled_flag, callbacks, parent, description, opened_ms, ended_ms}.

local keep = arg_int('batch_settle', 1, 'keep_ms', 1)
local fired = arg_int('batch_settle', 2, 'fired', 0)
if (#ARGV - 2) % 2 ~= 0 then
    error('batch_settle: reports must be member, counts pairs')
end
local st = redis.call('HGET', KEYS[1], 'st')
if not st then
    return {''}
end

local function numbers(text)
    local out = {}
    for n in string.gmatch(text or '', '%d+') do
        out[#out + 1] = tonumber(n)
    end
    return out
end

for i = 3, #ARGV, 2 do
    local member, told = ARGV[i], ARGV[i + 1]
    local had = redis.call('HGET', KEYS[1], member)
    if had then
        if string.sub(member, 1, 2) == 'q:' then
            local new, old = share_of(told), share_of(had)
            if not new then
                error('batch_settle: the share of ' .. member .. ' must read '
                    .. "'enq,done,dead,cancelled,failed,flag', not " .. told)
            end
            if old then
                for j = 1, 5 do
                    new[j] = math.max(new[j], old[j])
                end
                if old[6] == 'x' or new[6] == '' then
                    new[6] = old[6]
                end
            end
            redis.call('HSET', KEYS[1], member, share_text(new))
        elseif had == '' then
            if #numbers(told) ~= 5 then
                error('batch_settle: a child batch reports 5 counts, not ' .. told)
            end
            redis.call('HSET', KEYS[1], member, told)
        end
    end
end

if st == 'closed' then
    local ended = true
    local all = redis.call('HGETALL', KEYS[1])
    for i = 1, #all, 2 do
        local f, v = all[i], all[i + 1]
        if string.sub(f, 1, 2) == 'q:' then
            local s = share_of(v)
            if not (s and share_ended(s)) then
                ended = false
                break
            end
        elseif string.sub(f, 1, 2) == 'k:' and v == '' then
            ended = false
            break
        end
    end
    if not ended then
        return {st}
    end
    local t = redis.call('TIME')
    local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    st = 'ended'
    redis.call('HSET', KEYS[1], 'st', st, 'te', now)
    redis.call('PEXPIRE', KEYS[1], keep)
end
if st ~= 'ended' then
    return {st}
end
if redis.call('HEXISTS', KEYS[1], 'fired') == 1 then
    return {'fired'}
end
if fired == 1 then
    local t = redis.call('TIME')
    redis.call('HSET', KEYS[1], 'fired', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
    redis.call('PEXPIRE', KEYS[1], keep)
    return {'fired'}
end
-- the counts: each share's, each child's
local total, done, dead, cancelled, failed = 0, 0, 0, 0, 0
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
    local f, v = all[i], all[i + 1]
    local kind = string.sub(f, 1, 2)
    if kind == 'q:' then
        local s = share_of(v)
        total, done, dead = total + s[1], done + s[2], dead + s[3]
        cancelled, failed = cancelled + s[4], failed + s[5]
    elseif kind == 'k:' then
        local c = numbers(v)
        total, done, dead = total + c[1], done + c[2], dead + c[3]
        cancelled, failed = cancelled + c[4], failed + c[5]
    end
end
local h = redis.call('HMGET', KEYS[1], 'cx', 'cb', 'parent', 'd', 't0', 'te')
return {'fire', total, done, dead, cancelled, failed, h[1] and 1 or 0, h[2] or '', h[3] or '',
    h[4] or '', tonumber(h[5] or 0), tonumber(h[6] or 0)}
