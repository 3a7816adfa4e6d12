--! include many
--! include unique
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
    local recs = call_many('HMGET', k.links, ids)
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
        call_many('HDEL', k.links, gone)
    end
    if #members > 0 then
        call_many('ZREM', k.tagged, members)
    end
end
