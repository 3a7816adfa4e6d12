--! include many
-- Batches (fastq/protocol/batches.py): each queue holds its share of a batch, counted
-- by the scripts that end its jobs, in the same call, so a count is never missed nor
-- doubled; the batch's own hash (another slot, maybe another master) learns each
-- share's final counts from whoever sees it end (batch_settle.lua).
--
-- batched  hash  job id -> its batch id (also in the job's envelope, as "b"): for
--                the ends that do not come with their batch (a cancel, a hand-back,
--                a purge, an ack not grouped by batch), which look it up and delete
--                it. An ack grouped by batch (the worker read "b") leaves it, a
--                lookup and a delete per job saved: a job counts once all the same,
--                since its ack counts only the jobs its worker still held. What it
--                leaves goes with the whole hash once no share is live (UNLINK), or
--                by a sweep (' sweep') once the share ends while others live.
-- batches  hash  batch id -> the queue's share: 'enq,done,dead,cancelled,failed,flag';
--                flag '' while the batch is open, 'c' once sealed by its close (no
--                enqueue joins it then), 'x' sealed by a cancel;
--                and one field ' live' (a batch id holds no space): '<n>' or, when
--                n is 1, '1 <batch id>': how many shares have jobs not ended yet, and
--                which one when it is one; and ' sweep': the HSCAN cursor of a
--                sweep of batched under way, which deletes the entries of shares
--                not live (a step per call that counts ends: ack, cancel, release,
--                purge); a '+' after it: another pass once this one is through (a
--                share ended meanwhile, maybe behind the cursor)
-- due      set   batch ids whose sealed share has ended (every job enqueued into it
--                done, dead or cancelled): what a settler must tell the batch
-- failed counts the jobs that failed at least once (retried, then done or dead; or
-- dead at once): once a job, at its first failure.
--
-- The ' live' field is what keeps the other ends of a blast cheap: while one batch
-- alone has jobs live in the queue (every live entry in batched is then its own), a
-- job's end is counted by one HDEL of its entry, the count HDEL returns going to
-- that batch, with no HMGET to find each job's batch.

local BATCH_DONE, BATCH_DEAD, BATCH_CANCELLED = 2, 3, 4

local function share_of(text)
    if not text then
        return nil
    end
    local e, d, x, c, f, flag = string.match(text, '^(%d+),(%d+),(%d+),(%d+),(%d+),(%a?)$')
    if not e then
        return nil
    end
    return {tonumber(e), tonumber(d), tonumber(x), tonumber(c), tonumber(f), flag}
end

local function share_text(s)
    return string.format('%d,%d,%d,%d,%d,%s', s[1], s[2], s[3], s[4], s[5], s[6])
end

local function share_ended(s)
    return s[6] ~= '' and s[2] + s[3] + s[4] >= s[1]
end

local LIVE = ' live'
local SWEEP = ' sweep'
-- entries a sweep step reads (HSCAN's COUNT): about 20 us of Redis' time
local SWEEP_STEP = 200

local function share_live(s)
    return s[1] > s[2] + s[3] + s[4]
end

-- live_of: how many shares of the queue have jobs not ended, and which when one.
local function live_of(batches)
    local v = redis.call('HGET', batches, LIVE)
    if not v then
        return 0, nil
    end
    local n, one = string.match(v, '^(%d+) ?(.*)$')
    return tonumber(n), one ~= '' and one or nil
end

-- note_live: the number of live shares changed by delta (the share of `bid` became
-- live, or stopped being so; it is written already). k holds the key names
-- (batched, batches). Once none is live, every entry left in batched is of a job
-- that ended: the hash goes (UNLINK: freed off Redis' main thread); when a share
-- stops being live beside others, a sweep starts (or one more pass of it: a pass
-- must begin after this share ended to be sure to see all of its entries).
local function note_live(k, delta, bid)
    local batches = k.batches
    local n, one = live_of(batches)
    n = n + delta
    if n <= 0 then
        redis.call('HDEL', batches, LIVE, SWEEP)
        redis.call('UNLINK', k.batched)
        return
    end
    if delta < 0 then  -- a sweep, or another pass once the one under way is through
        local cursor = redis.call('HGET', batches, SWEEP)
        if not cursor then
            redis.call('HSET', batches, SWEEP, '0')
        elseif string.sub(cursor, -1) ~= '+' then
            redis.call('HSET', batches, SWEEP, cursor .. '+')
        end
    end
    if n == 1 then
        if delta > 0 then
            one = bid
        else  -- which is left: a scan, once a batch's share ends
            one = nil
            local all = redis.call('HGETALL', batches)
            for i = 1, #all, 2 do
                local s = all[i] ~= LIVE and share_of(all[i + 1])
                if s and share_live(s) then
                    one = all[i]
                    break
                end
            end
        end
        redis.call('HSET', batches, LIVE, '1 ' .. (one or ''))
    else
        redis.call('HSET', batches, LIVE, string.format('%d', n))
    end
end

-- add_enqueued: n jobs joined the share of `bid` (enqueue.lua).
local function add_enqueued(k, bid, n)
    local s = share_of(redis.call('HGET', k.batches, bid))
    local was = share_live(s)
    s[1] = s[1] + n
    redis.call('HSET', k.batches, bid, share_text(s))
    if not was then
        note_live(k, 1, bid)
    end
end

-- sweep_step: a step of the sweep under way, if one is: of SWEEP_STEP entries of
-- batched, those whose share is not live (ended, or gone) are deleted.
local function sweep_step(k)
    local cursor = redis.call('HGET', k.batches, SWEEP)
    if not cursor then
        return
    end
    local again = string.sub(cursor, -1) == '+'
    if again then
        cursor = string.sub(cursor, 1, -2)
    end
    local reply = redis.call('HSCAN', k.batched, cursor, 'COUNT', SWEEP_STEP)
    local entries, live, gone = reply[2], {}, {}
    for i = 1, #entries, 2 do
        local b = entries[i + 1]
        local is_live = live[b]
        if is_live == nil then
            local s = share_of(redis.call('HGET', k.batches, b))
            is_live = s ~= nil and share_live(s)
            live[b] = is_live
        end
        if not is_live then
            gone[#gone + 1] = entries[i]
        end
    end
    if #gone > 0 then
        call_many('HDEL', k.batched, gone)
    end
    if reply[1] == '0' and not again then
        redis.call('HDEL', k.batches, SWEEP)
    else
        redis.call('HSET', k.batches, SWEEP, reply[1] .. (again and '+' or ''))
    end
end

-- add_ends: counts[b] jobs of each batch b of `order` ended as `slot`; `failed`:
-- they failed at their first run too. Returns the batch ids whose sealed share has
-- now ended (each also noted in due).
local function add_ends(k, counts, order, slot, failed)
    local ended = {}
    for _, b in ipairs(order) do
        local s = share_of(redis.call('HGET', k.batches, b))
        if s then
            local was = share_live(s)
            s[slot] = s[slot] + counts[b]
            if failed then
                s[5] = s[5] + counts[b]
            end
            redis.call('HSET', k.batches, b, share_text(s))
            if was and not share_live(s) then
                note_live(k, -1, b)
            end
            if share_ended(s) then
                ended[#ended + 1] = b
            end
        end
    end
    if #ended > 0 then
        call_many('SADD', k.batches_due, ended)
    end
    sweep_step(k)
    return ended
end

-- n more jobs of batch b: counts[b], b added to `order` the first time.
local function tally(counts, order, b, n)
    if not counts[b] then
        counts[b] = 0
        order[#order + 1] = b
    end
    counts[b] = counts[b] + n
end

-- The batches of `ids` (those in one), grouped: {bid -> count}, the bids in order,
-- and the ids in a batch. One EXISTS for a queue that never had a batched job.
local function batches_of(batched, ids)
    if #ids == 0 or redis.call('EXISTS', batched) == 0 then
        return nil
    end
    local counts, order, members = {}, {}, {}
    local bids = call_many('HMGET', batched, ids)
    for i = 1, #ids do
        local b = bids[i]
        if b then
            members[#members + 1] = ids[i]
            tally(counts, order, b, 1)
        end
    end
    if #members == 0 then
        return nil
    end
    return counts, order, members
end

-- end_batches: the jobs `ids` ended as `slot` (BATCH_DONE, BATCH_DEAD or
-- BATCH_CANCELLED); `failed`: they failed at their first run too (a death at once).
-- k holds the key names (batched, batches, batches_due). Returns the batch ids whose
-- sealed share has now ended (each also noted in due).
local function end_batches(k, ids, slot, failed)
    if #ids == 0 or redis.call('EXISTS', k.batched) == 0 then
        return {}
    end
    local counts, order
    local n_live, one = live_of(k.batches)
    if n_live == 1 and one then  -- every entry is one batch's: HDEL counts them
        local removed = call_many('HDEL', k.batched, ids)
        if removed == 0 then
            return {}
        end
        counts, order = {[one] = removed}, {one}
    else
        local members
        counts, order, members = batches_of(k.batched, ids)
        if not counts then
            return {}
        end
        call_many('HDEL', k.batched, members)
    end
    return add_ends(k, counts, order, slot, failed)
end

-- The groups of an ack's done section, ARGV[at]: '' (none), or 'n1 b1 n2 b2 ...',
-- the first n1 done ids of batch b1, the next n2 of b2... (the batch each job's
-- envelope names, "b"). Checked before any write: {batch, last index}, in order.
local function done_groups(script, at, n_done)
    local text = ARGV[at] or ''
    if text == '' then
        return {}
    end
    if string.gsub(text, '%d+ [!-~]+ ?', '') ~= '' then
        error(script .. ': ARGV[' .. at .. '] must be groups "n batch n batch ...", not "'
            .. string.sub(text, 1, 60) .. '"')
    end
    local groups, upto = {}, 0
    for n, b in string.gmatch(text, '(%d+) ([!-~]+)') do
        upto = upto + tonumber(n)
        groups[#groups + 1] = {b, upto}
    end
    if upto > n_done then
        error(script .. ': the groups of ARGV[' .. at .. '] hold ' .. upto
            .. ' jobs, more than the ' .. n_done .. ' done')
    end
    return groups
end

-- end_grouped: the done jobs `ids` of a done section of `n_sent` ids grouped by
-- `groups` (done_groups), ended; `pos[i] - offset` is the index in the section of
-- ids[i] (increasing). Those in a group count for its batch, without touching
-- batched. Returns the rest (not in a group: for the caller to look up) and the
-- batch ids whose sealed share has now ended.
local function end_grouped(k, groups, ids, n_sent, pos, offset)
    local counts, order, rest = {}, {}, {}
    if #ids == n_sent then  -- none stale (most often): each group whole
        local from = 0
        for g = 1, #groups do
            local upto = groups[g][2]
            tally(counts, order, groups[g][1], upto - from)
            from = upto
        end
        if from < #ids then
            rest = slice(ids, from + 1, #ids)
        end
    else
        local g = 1
        for i = 1, #ids do
            local at = pos[i] - offset
            while groups[g] and at > groups[g][2] do
                g = g + 1
            end
            local group = groups[g]
            if group then
                tally(counts, order, group[1], 1)
            else
                rest[#rest + 1] = ids[i]
            end
        end
    end
    if #order == 0 then
        return rest, {}
    end
    return rest, add_ends(k, counts, order, BATCH_DONE)
end

-- fail_batches: the jobs `ids` failed for the first time and will run again.
local function fail_batches(k, ids)
    local counts, order = batches_of(k.batched, ids)
    if not counts then
        return
    end
    for _, b in ipairs(order) do
        local s = share_of(redis.call('HGET', k.batches, b))
        if s then
            s[5] = s[5] + counts[b]
            redis.call('HSET', k.batches, b, share_text(s))
        end
    end
end

-- first_failures: of the ids and their new envelopes (pairs from ARGV at `starts`
-- + `offset`), those whose envelope says this is their first failure (attempts 1).
-- The workers' fields are in the envelope's last element, its options: the last
-- '"attempts":' is theirs (one inside the arguments comes before; one inside an
-- error message is escaped, '\"attempts\":').
local function first_failures(ids, starts, offset)
    local out = {}
    for i = 1, #ids do
        local n
        for found in string.gmatch(ARGV[starts[i] + offset], '"attempts":(%d+)') do
            n = found
        end
        if not n or tonumber(n) <= 1 then
            out[#out + 1] = ids[i]
        end
    end
    return out
end

-- end_dead_batches: the jobs `ids` died, their envelopes at ARGV[starts[i] + offset]:
-- those that died at their first failure count failed too. Returns the batch ids
-- whose sealed share has now ended.
local function end_dead_batches(k, ids, starts, offset)
    local first = first_failures(ids, starts, offset)
    local ended = end_batches(k, first, BATCH_DEAD, true)
    if #first < #ids then
        local at_once = {}
        for i = 1, #first do
            at_once[first[i]] = true
        end
        local later = {}
        for i = 1, #ids do
            if not at_once[ids[i]] then
                later[#later + 1] = ids[i]
            end
        end
        local more = end_batches(k, later, BATCH_DEAD)
        for i = 1, #more do
            ended[#ended + 1] = more[i]
        end
    end
    return ended
end
