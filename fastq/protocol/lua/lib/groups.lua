-- Groups: the ready jobs of a queue's groups, served round-robin (docs/groups.md).
--
-- gk.ready  zset  every group's ready jobs, all scored 0, ordered by member bytes:
--                 "<group>\n<order><id>", order = 6 hex digits of 2^20 - priority
--                 (the higher priority first), then 12 of the job's place in its
--                 group (GROUP_BACK + seq from the back, GROUP_BACK - n at the front)
-- gk.ring   list  the groups with ready jobs, the next to serve at the left; ''
--                 is the queue's jobs of no group (its ready list and prio zset),
--                 which stays in the ring once the queue has had a grouped job
-- gk.stats  hash  counters: seq (shared with prio), gfront (hand-backs' places)
--
-- A group is in the ring exactly while it has members in gk.ready: a push into an
-- empty group adds it at the back, and the claim that takes a group's last job
-- takes it out. A group name is 1 to 100 printable characters, so never holds "\n".
-- 2^46: the places of jobs pushed to the back are above it, of those handed back below
local GROUP_BACK = 70368744177664
local GROUP_ORDER_LEN = 18

-- the lexical range of one group's members
local function group_range(g)
    return '[' .. g .. '\n', '(' .. g .. '\11'
end

local function group_prefix(g, priority)
    return g .. '\n' .. string.format('%06x', 1048576 - priority)
end

-- group_add: put members (of one group, each built by group_prefix and a place)
-- into gk.ready; the group joins the back of the ring if it had none.
local function group_add(gk, g, members)
    local lo, hi = group_range(g)
    local had = #redis.call('ZRANGEBYLEX', gk.ready, lo, hi, 'LIMIT', 0, 1) > 0
    local args = {}
    for i = 1, #members do
        args[#args + 1] = 0
        args[#args + 1] = members[i]
        if #args >= 4000 then
            redis.call('ZADD', gk.ready, unpack(args))
            args = {}
        end
    end
    if #args > 0 then
        redis.call('ZADD', gk.ready, unpack(args))
    end
    if not had then
        redis.call('RPUSH', gk.ring, g)
    end
end

-- group_push_back: ids of group g and one priority, after the group's jobs of
-- that priority (in the order given)
local function group_push_back(gk, g, priority, ids)
    local last = redis.call('HINCRBY', gk.stats, 'seq', #ids)
    local prefix = group_prefix(g, priority)
    local members = {}
    for i = 1, #ids do
        members[i] = prefix .. string.format('%012x', GROUP_BACK + last - #ids + i) .. ids[i]
    end
    group_add(gk, g, members)
end

-- the group and priority in an envelope's fields (item 4), if it has a group
local function envelope_group(env)
    if not env or not string.find(env, '"g":', 1, true) then
        return nil
    end
    local ok, decoded = pcall(cjson.decode, env)
    if not ok or type(decoded) ~= 'table' or type(decoded[4]) ~= 'table' then
        return nil
    end
    local g = decoded[4]['g']
    if type(g) ~= 'string' or g == '' then
        return nil
    end
    local p = tonumber(decoded[4]['p']) or 0
    return g, math.floor(p)
end

-- group_front: hand ids back to the very front of their groups (the first id
-- foremost), those of a grouped envelope; returns the others, in order, for the
-- queue's own front. Reads the envelopes: only a queue that has had a grouped job
-- calls it.
local function group_front(gk, jobs, ids)
    local envs = redis.call('HMGET', jobs, unpack(ids))
    local plain, grouped, groups, prios = {}, {}, {}, {}
    for i = 1, #ids do
        local g, p = envelope_group(envs[i])
        if g then
            grouped[#grouped + 1] = ids[i]
            groups[#groups + 1] = g
            prios[#prios + 1] = p
        else
            plain[#plain + 1] = ids[i]
        end
    end
    if #grouped > 0 then
        -- places below every earlier hand-back's: the first id of this call foremost
        local last = redis.call('HINCRBY', gk.stats, 'gfront', #grouped)
        for i = 1, #grouped do
            local place = string.format('%012x', GROUP_BACK - last + i - 1)
            group_add(gk, groups[i], {group_prefix(groups[i], prios[i]) .. place .. grouped[i]})
        end
    end
    return plain
end

-- the set of a queue's paused groups, from its settings' 'paused_groups' field
-- (their names joined by '\n'; a name never holds one); nil: none paused
local function paused_set(field)
    if not field or field == '' then
        return nil
    end
    local set = {}
    for name in string.gmatch(field, '[^\n]+') do
        set[name] = true
    end
    return set
end

-- claim_grouped: take up to n jobs round-robin across the ring's groups: one of
-- each group in the ring's order, then again, until n are taken or every group is
-- empty; the ring then starts at the group after the last one served, and a group
-- emptied leaves it. pop_plain(count) pops the jobs of no group (the ring's '').
-- A paused group (paused: a set, or nil) is passed over, keeps its jobs and its
-- place in the ring, behind the groups served. Returns the ids, in the order served.
local function claim_grouped(gk, n, plain_size, pop_plain, paused)
    -- n groups and one more: only '' may be empty, and it then costs no turn; and
    -- as many more as are paused, which cost no turn either
    local extra = 0
    if paused then
        for _ in pairs(paused) do
            extra = extra + 1
        end
    end
    local ring = redis.call('LRANGE', gk.ring, 0, n + extra)
    local m = #ring
    if m == 0 then
        return pop_plain(n)
    end
    local want = math.ceil(n / m) + 1  -- one more than an even share: is it the last?
    local bufs, exact, taken, gone, seen, dup = {}, {}, {}, {}, {}, {}
    for i = 1, m do
        taken[i] = 0
        if seen[ring[i]] then
            -- twice in the ring (never written so): served once, the copy dropped
            bufs[i], exact[i], gone[i], dup[i] = {}, true, true, true
        elseif paused and paused[ring[i]] then
            bufs[i], exact[i], gone[i] = {}, true, true
        elseif ring[i] == '' then
            bufs[i] = plain_size()
            exact[i] = true
        else
            local lo, hi = group_range(ring[i])
            bufs[i] = redis.call('ZRANGEBYLEX', gk.ready, lo, hi, 'LIMIT', 0, want)
            exact[i] = #bufs[i] < want
        end
        seen[ring[i]] = true
    end
    local function size(i)
        return type(bufs[i]) == 'number' and bufs[i] or #bufs[i]
    end
    local live = m
    for j = 1, m do
        if gone[j] then
            live = live - 1
        end
    end
    local order, i, visits = {}, 1, 0
    while #order < n and live > 0 do
        visits = visits + 1
        if not gone[i] then
            if taken[i] >= size(i) and not exact[i] then
                local lo, hi = group_range(ring[i])
                local count = n - #order + 1
                local more = redis.call('ZRANGEBYLEX', gk.ready, lo, hi, 'LIMIT', taken[i], count)
                for j = 1, #more do
                    bufs[i][#bufs[i] + 1] = more[j]
                end
                exact[i] = #more < count
            end
            if taken[i] < size(i) then
                taken[i] = taken[i] + 1
                order[#order + 1] = i
            else
                gone[i] = true
                live = live - 1
            end
        end
        i = i % m + 1
    end
    -- the jobs, in the order served; the members taken out of gk.ready
    local plain, members, ids, used = nil, {}, {}, {}
    for j = 1, m do
        if type(bufs[j]) == 'number' then
            plain = pop_plain(taken[j])
        else
            for k = 1, taken[j] do
                members[#members + 1] = bufs[j][k]
            end
        end
    end
    local from_plain = 0
    for j = 1, #order do
        local g = order[j]
        if type(bufs[g]) == 'number' then
            from_plain = from_plain + 1
            if plain[from_plain] then
                ids[#ids + 1] = plain[from_plain]
            end
        else
            used[g] = (used[g] or 0) + 1
            ids[#ids + 1] = string.sub(bufs[g][used[g]], #ring[g] + 2 + GROUP_ORDER_LEN)
        end
    end
    for lo = 1, #members, 4000 do
        redis.call('ZREM', gk.ready, unpack(members, lo, math.min(lo + 3999, #members)))
    end
    -- the ring: from the next group to serve on. Those loaded and not served yet
    -- keep their place ahead of the groups not loaded; the ones served go behind
    -- them (all after them once every loaded group had its turn); a group whose
    -- every job was taken leaves (never '').
    local ahead, behind = {}, {}
    for j = 0, m - 1 do
        local g = (i - 1 + j) % m + 1
        local held = paused and paused[ring[g]] and not dup[g]
        local emptied = not held and (dup[g] or (ring[g] ~= '' and taken[g] >= #bufs[g]))
        if emptied and not exact[g] then
            local lo, hi = group_range(ring[g])
            emptied = #redis.call('ZRANGEBYLEX', gk.ready, lo, hi, 'LIMIT', 0, 1) == 0
        end
        if held then
            behind[#behind + 1] = ring[g]
        elseif not emptied then
            if visits < m and g >= i then
                ahead[#ahead + 1] = ring[g]
            else
                behind[#behind + 1] = ring[g]
            end
        end
    end
    redis.call('LTRIM', gk.ring, m, -1)
    if #ahead > 0 then
        local reversed = {}
        for j = #ahead, 1, -1 do
            reversed[#reversed + 1] = ahead[j]
        end
        redis.call('LPUSH', gk.ring, unpack(reversed))
    end
    if #behind > 0 then
        redis.call('RPUSH', gk.ring, unpack(behind))
    end
    return ids
end
