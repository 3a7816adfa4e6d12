-- HELD_SENTINEL: a permanent member of every held set, longer than 64 bytes, which
-- keeps the set out of the compact listpack encoding, where every batched insert
-- or lookup is a linear scan (a batch would become quadratic). Never a job id.
local HELD_SENTINEL = 'fastq:sentinel:keeps-this-key-out-of-listpack-encoding:never-a-job-id'
