package redis

import (
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// DefaultDedupWindow is how long a [Publisher] remembers a message's id when
// [PublisherConfig.DedupWindow] is zero.
const DefaultDedupWindow = 10 * time.Minute

// dedupKeyInfix comes between a deduplication key's hash tag and the
// message UUID: see dedupKeyPrefix.
const dedupKeyInfix = ":outbox:dedup:"

// addScript adds a message to a stream unless its deduplication key exists.
//
// KEYS[1] is the stream, KEYS[2] the message's deduplication key; ARGV[1] is
// the window in milliseconds, ARGV[2:] the arguments of XADD after the key
// (trimming, "*", then field value pairs). It replies with the new entry's
// id, with 0 when the key existed (the message was added before, by this
// call's earlier attempt or another one), or with XADD's error, having
// deleted the key again so that a later attempt is not dropped. A script
// runs atomically, so no other command comes between the SET and the XADD,
// and its effects are replicated together.
var addScript = goredis.NewScript(`
if not redis.call('SET', KEYS[2], '1', 'NX', 'PX', ARGV[1]) then
  return 0
end
local id = redis.pcall('XADD', KEYS[1], unpack(ARGV, 2))
if type(id) == 'table' and id.err then
  redis.call('DEL', KEYS[2])
end
return id
`)

// dedupKeyPrefix returns the prefix of stream's deduplication keys (the
// message UUID follows it). The key must hash to the stream's Redis Cluster
// slot, or the script fails with CROSSSLOT there. A key's slot is the CRC16
// of its hash tag (the text between its first "{" and the first "}" after
// it, when not empty) or of the whole key. So:
//
//   - a stream without "}" (the usual case): "{" + stream + "}", whose tag
//     is the stream's whole name;
//   - a stream with a hash tag of its own ("{orders}.placed"): that tag in
//     braces, then the stream's name;
//   - a stream with "}" but no tag ("a}b"), which no wrapping keeps whole:
//     in braces, the smallest number that hashes to the stream's slot, then
//     the stream's name.
//
// The stream's name is in every key, so no two streams share keys: the
// first form has nothing between "}" and the infix, the others have the
// name, and a name fixes its own tag.
func dedupKeyPrefix(stream string) string {
	tag := hashTag(stream)
	switch {
	case tag != "":
	case !strings.Contains(stream, "}"):
		return "{" + stream + "}" + dedupKeyInfix
	default:
		slot := keySlot(stream)
		if t, ok := slotTags.Load(slot); ok {
			tag = t.(string)
		} else {
			tag = slotTag(slot)
			slotTags.Store(slot, tag)
		}
	}
	return "{" + tag + "}" + stream + dedupKeyInfix
}

// slotTags caches slotTag's answers (a search of up to 200,000 CRCs).
var slotTags sync.Map // int → string

// hashTag returns key's Redis Cluster hash tag, or "" when it has none.
func hashTag(key string) string {
	open := strings.IndexByte(key, '{')
	if open < 0 {
		return ""
	}
	n := strings.IndexByte(key[open+1:], '}')
	if n <= 0 {
		return ""
	}
	return key[open+1 : open+1+n]
}

// keySlot returns key's Redis Cluster slot.
func keySlot(key string) int {
	if tag := hashTag(key); tag != "" {
		key = tag
	}
	return int(crc16(key) % 16384)
}

// slotTag returns the smallest decimal number whose string hashes to slot
// (every slot has one below 200,000).
func slotTag(slot int) string {
	for i := 0; ; i++ {
		s := strconv.Itoa(i)
		if int(crc16(s)%16384) == slot {
			return s
		}
	}
}

// crc16 is the CRC-16/XMODEM of s, as Redis Cluster computes slots.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// scriptArgs returns addScript's ARGV for a, with window in milliseconds.
// The fields are sorted, so the same message is always encoded alike.
func scriptArgs(window string, a *goredis.XAddArgs) []any {
	values := a.Values.(map[string]any)
	args := make([]any, 0, 5+2*len(values))
	args = append(args, window)
	switch {
	case a.MaxLen > 0:
		args = append(args, "MAXLEN", "~", a.MaxLen)
	case a.MinID != "":
		args = append(args, "MINID", "~", a.MinID)
	}
	args = append(args, "*")
	keys := make([]string, 0, len(values))
	for k := range values {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		args = append(args, k, values[k])
	}
	return args
}
