--! include many
-- The links record of a job that has tags or a unique lock (links hash, id -> record),
-- written by enqueue: a first line, empty or the unique mode ('e' released when the
-- job ends, 's' when it starts, 'w' kept for its whole window) followed by the
-- unique key; then one line per tag. Tags and unique keys hold no newline (checked
-- by enqueue), so the record splits on '\n'.
local function parse_link(rec)
    local nl = string.find(rec, '\n', 1, true)
    local head = nl and string.sub(rec, 1, nl - 1) or rec
    local tags = {}
    local from = nl and nl + 1
    while from do
        local e = string.find(rec, '\n', from, true)
        tags[#tags + 1] = string.sub(rec, from, e and e - 1 or -1)
        from = e and e + 1
    end
    if head == '' then
        return nil, nil, tags
    end
    return string.sub(head, 1, 1), string.sub(head, 2), tags
end

-- release_lock: drop the unique lock `ukey` only if `id` still holds it (a later
-- job may hold the key once this one's window passed).
local function release_lock(unique, unique_exp, ukey, id)
    if redis.call('HGET', unique, ukey) == id then
        redis.call('HDEL', unique, ukey)
        redis.call('ZREM', unique_exp, ukey)
    end
end

-- release_started: the claim's one step for unique_until="start" jobs, called only
-- on a queue whose settings say it has some (field ustart): the locks of the
-- claimed ids in mode 's' are released as they start.
local function release_started(links, unique, unique_exp, ids)
    local recs = call_many('HMGET', links, ids)
    for i = 1, #ids do
        local rec = recs[i]
        if rec and string.byte(rec, 1) == 115 then  -- 's'
            local nl = string.find(rec, '\n', 1, true)
            release_lock(unique, unique_exp, string.sub(rec, 2, nl and nl - 1 or -1), ids[i])
        end
    end
end
