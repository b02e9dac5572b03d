"""The server-side scripts of a table store (Lua, run by EVAL): read a piece of a hash with its
bounds (``_READ``), write a kernel's part in a transaction (``_WRITE``), add entries first writer
wins (``_ADD``), keep the older hash under a name no key holds (``_KEEP_OLDER``). ``client.Store``
sends them; their keys and arguments are described above each."""

# One piece of a hash from cursor ARGV[1] (a value over ARGV[2] bytes replaced by its length, never
# sent); with ARGV[4] set, the kernel ARGV[4]'s provenance (HGET KEYS[2]) and whether the arch's
# older hash KEYS[3] exists, both in the request that ends the scan: what an entry read was added under;
# with ARGV[5] set, each field's value in the hash KEYS[4] too (its measurements; over ARGV[5] bytes: its length);
# with ARGV[6] set, a hash of more fields than that is not scanned: the first request ends the scan with
# no fields and the hash's length as the sixth item (a stuffed kernel's hash costs one HLEN, not its fields).
_READ = """
local function tail(cursor, out, beside, length)
  local provenance, older = false, 0
  if cursor == '0' and ARGV[4] ~= '' then
    provenance = redis.call('HGET', KEYS[2], ARGV[4])
    if provenance and #provenance > tonumber(ARGV[2]) then provenance = #provenance end
    older = redis.call('EXISTS', KEYS[3])
  end
  return {cursor, out, provenance, older, beside, length}
end
if ARGV[1] == '0' and ARGV[6] ~= '' then
  local length = redis.call('HLEN', KEYS[1])
  if length > tonumber(ARGV[6]) then return tail('0', {}, {}, length) end
end
local reply = redis.call('HSCAN', KEYS[1], ARGV[1], 'COUNT', tonumber(ARGV[3]))
local out, beside = {}, {}
for i = 1, #reply[2], 2 do
  local v = reply[2][i + 1]
  table.insert(out, reply[2][i])
  if #v > tonumber(ARGV[2]) then table.insert(out, #v) else table.insert(out, v) end
  if ARGV[5] ~= '' then
    local m = redis.call('HGET', KEYS[4], reply[2][i])
    if m then
      table.insert(beside, reply[2][i])
      if #m > tonumber(ARGV[5]) then table.insert(beside, #m) else table.insert(beside, m) end
    end
  end
end
return tail(reply[1], out, beside, -1)
"""

# A kernel's part written, queued in MULTI after WATCH of KEYS[1..3]: ARGV[1] the kernel, ARGV[2]
# '1' where the writer read a provenance (ARGV[3]) in KEYS[4], ARGV[4] the new one ('' leaves it);
# ARGV[5..9] how many fields are set in the kernel's hash, removed there, set in its measurements,
# removed there, set in its superseded versions; then those fields (and values). 'provenance': it
# changed since the read (nothing written; the writer reads again). KEYS[5]: the arch's kernels set.
_WRITE = """
local cur = redis.call('HGET', KEYS[4], ARGV[1])
if (ARGV[2] == '1') ~= (cur ~= false) or (cur and cur ~= ARGV[3]) then return 'provenance' end
if ARGV[4] ~= '' then redis.call('HSET', KEYS[4], ARGV[1], ARGV[4]) end
redis.call('SADD', KEYS[5], ARGV[1])
local i = 10
for part, target in ipairs({{1, 2}, {1, 1}, {2, 2}, {2, 1}, {3, 2}}) do
  for _ = 1, tonumber(ARGV[4 + part]) do
    if target[2] == 2 then redis.call('HSET', KEYS[target[1]], ARGV[i], ARGV[i + 1])
    else redis.call('HDEL', KEYS[target[1]], ARGV[i]) end
    i = i + target[2]
  end
end
return 'ok'
"""

# A kernel's entries added, first writer wins: ARGV[1] the kernel, ARGV[2] its provenance, ARGV[3]
# 'same' where a differing provenance differs only where it does not matter, 'upgrade' where the
# entries come from the older hash (moved: not found held there); then per entry its key,
# its field in the older hash, its value. KEYS: the kernel's hash, provenance, the older hash, the set.
_ADD = """
local cur = redis.call('HGET', KEYS[2], ARGV[1])
if cur and ARGV[2] ~= '' and cur ~= ARGV[2] and ARGV[3] == '' then return {'provenance', cur} end
if (not cur) and ARGV[2] ~= '' then redis.call('HSET', KEYS[2], ARGV[1], ARGV[2]) end
redis.call('SADD', KEYS[4], ARGV[1])
local older = ARGV[3] ~= 'upgrade' and redis.call('EXISTS', KEYS[3]) == 1
local kept = {}
for i = 4, #ARGV, 3 do
  local held = older and redis.call('HGET', KEYS[3], ARGV[i + 1])
  if held then
    table.insert(kept, ARGV[i]); table.insert(kept, held)
  elseif redis.call('HSETNX', KEYS[1], ARGV[i], ARGV[i + 2]) == 0 then
    table.insert(kept, ARGV[i]); table.insert(kept, redis.call('HGET', KEYS[1], ARGV[i]))
  end
end
return {'ok', kept}
"""

# The arch's older hash KEYS[1] renamed to KEYS[2], or to KEYS[2] with the first suffix -2, -3, ...
# no key holds (a backup is never replaced, two upgrades in one second included); false where the
# older hash is gone (another upgrade renamed it). Every name shares the arch's hash tag (one slot).
_KEEP_OLDER = """
if redis.call('EXISTS', KEYS[1]) == 0 then return false end
local name, n = KEYS[2], 1
while redis.call('EXISTS', name) == 1 do
  n = n + 1
  name = KEYS[2] .. '-' .. n
end
redis.call('RENAME', KEYS[1], name)
return name
"""
