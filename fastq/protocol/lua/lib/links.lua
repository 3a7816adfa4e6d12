--! include unique
-- zrem_many / zadd_many: ZREM / ZADD in slices, as unpack() is bounded by Lua's
-- C stack (~8000 values) and a batch of 1000 jobs with 20 tags each has 20,000.
local function zrem_many(key, members)
    for lo = 1, #members, 4000 do
        redis.call('ZREM', key, unpack(members, lo, math.min(lo + 3999, #members)))
    end
end

-- end_links: the jobs `ids` ended (done, dead, broken, cancelled, purged, buried
-- as poison): drop their tag entries and links records and release their unique
-- locks, except a 'w' (window) lock, kept until its window ends unless
-- `release_window` (a purge: the operator deletes the jobs). k holds the key
-- names (links, tagged, unique, unique_exp). One EXISTS for a queue that never
-- had a tagged or unique job.
local function end_links(k, ids, release_window)
    if #ids == 0 or redis.call('EXISTS', k.links) == 0 then
        return
    end
    local recs = redis.call('HMGET', k.links, unpack(ids))
    local gone, members = {}, {}
    for i = 1, #ids do
        local rec = recs[i]
        if rec then
            local id = ids[i]
            gone[#gone + 1] = id
            local mode, ukey, tags = parse_link(rec)
            for t = 1, #tags do
                members[#members + 1] = tags[t] .. '\n' .. id
            end
            if mode and (release_window or mode ~= 'w') then
                release_lock(k.unique, k.unique_exp, ukey, id)
            end
        end
    end
    if #gone > 0 then
        redis.call('HDEL', k.links, unpack(gone))
    end
    if #members > 0 then
        zrem_many(k.tagged, members)
    end
end
