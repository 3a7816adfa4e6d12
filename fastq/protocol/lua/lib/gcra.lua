-- A rate limit as a GCRA (the "generic cell rate algorithm" of redis-cell): one
-- token every interval_us, and up to burst at once after a quiet spell. Its whole
-- state is one time, tat_us (the theoretical arrival time, µs on Redis' clock):
-- k tokens may be taken while max(tat, now) + k*interval <= now + burst*interval,
-- and taking k moves tat on by k*interval. So no window of length W ever sees more
-- than burst + W/interval tokens taken.

-- gcra_open: the tokens there are at now_us, and the state to take them from
-- (tat_us is nil for a limit never used).
local function gcra_open(tat_us, now_us, interval_us, burst)
    if not tat_us or tat_us < now_us then
        tat_us = now_us
    end
    return math.floor((now_us + burst * interval_us - tat_us) / interval_us), tat_us
end

-- gcra_due_ms: when the next token is due (ms, rounded up) if there is none now.
local function gcra_due_ms(tat_us, interval_us, burst)
    return math.ceil((tat_us - (burst - 1) * interval_us) / 1000)
end

-- gcra_state: the state after taking k tokens, as a string Redis stores exactly.
local function gcra_state(tat_us, interval_us, k)
    return string.format('%.0f', tat_us + k * interval_us)
end
