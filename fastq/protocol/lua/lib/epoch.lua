-- epoch_refused: nil when a worker's call carrying `epoch` may take effect, else the
-- error reply refusing it (the caller returns it before its first write).
--
-- A worker that gives up on a request (its reply did not come: a timeout, a cut
-- connection) cannot know whether Redis ran it or will: its bytes may still be on
-- their way, on a connection the worker has closed. So it bumps its epoch, and its
-- next calls carry the new one; the first to land records it in `key` (the
-- worker's epoch on this queue), and from then on a call carrying an older epoch
-- (the request given up on, landing late) is refused and changes nothing: a late
-- claim leases nothing the worker never received, a late ack settles nothing
-- twice. A record exists only for a worker that once gave up on a request, and
-- lives EPOCH_TTL_MS past its last bump (TCP gives up on a request long before);
-- a call finding none compares with 0, and one carrying a newer epoch writes it.
local EPOCH_TTL_MS = 86400000

local function epoch_refused(key, epoch)
    local recorded = tonumber(redis.call('GET', key)) or 0
    if epoch < recorded then
        return redis.error_reply('STALE epoch ' .. epoch .. ' < ' .. recorded
            .. ': a request its worker gave up on')
    end
    if epoch > recorded then
        redis.call('SET', key, epoch, 'PX', EPOCH_TTL_MS)
    end
    return nil
end
