package redis

import "testing"

func TestRedisKey(t *testing.T) {
	cases := []struct{ bucket, want string }{
		{"api|user=alice", "rls:{api|user=alice}"},
		{"api|user=alice|action=trade", "rls:{api|user=alice}|action=trade"},
		{"api|user=alice|action=trade|#10/minute", "rls:{api|user=alice}|action=trade|#10/minute"},
		{"api", "rls:{api}"},
		{"", "rls:{}"},
	}
	for _, c := range cases {
		if got := redisKey("rls:", c.bucket); got != c.want {
			t.Errorf("redisKey(%q) = %q, want %q", c.bucket, got, c.want)
		}
	}
}

func TestHierarchyLevelsShareASlot(t *testing.T) {
	user := redisKey(DefaultPrefix, "api|user=alice")
	trade := redisKey(DefaultPrefix, "api|user=alice|action=trade")
	other := redisKey(DefaultPrefix, "api|user=bob|action=trade")
	if slot(user) != slot(trade) {
		t.Errorf("levels of one hierarchy in slots %d and %d", slot(user), slot(trade))
	}
	if slot(user) == slot(other) {
		t.Errorf("alice and bob share slot %d (possible, but not for these keys)", slot(user))
	}
}

func TestSlot(t *testing.T) {
	// CRC-16/XMODEM's check value, and keys as Redis's CLUSTER KEYSLOT
	// answers them.
	if got := crc16("123456789"); got != 0x31C3 {
		t.Errorf("crc16(123456789) = %#x, want 0x31c3", got)
	}
	cases := map[string]uint16{
		"foo":                  12182,
		"{user1000}.following": 3443,
		"{user1000}.followers": 3443,
		"foo{}{bar}":           8363,
	}
	for key, want := range cases {
		if got := slot(key); got != want {
			t.Errorf("slot(%q) = %d, want %d", key, got, want)
		}
	}
	if slot("{user1000}.following") != slot("user1000") {
		t.Error("the hash tag is not what is hashed")
	}
	if slot("foo{}{bar}") != crc16("foo{}{bar}")%slotCount {
		t.Error("an empty first tag must hash the whole key")
	}
}
