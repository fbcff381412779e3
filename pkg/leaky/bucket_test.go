package leaky

import (
	"strings"
	"testing"
	"time"
)

const us = time.Microsecond

func TestBucketValidate(t *testing.T) {
	cases := []struct {
		bucket Bucket
		want   string // "" for valid
	}{
		{Bucket{0, time.Second, 1}, ""},
		{Bucket{MaxSize, us, MaxSize}, ""},
		{Bucket{-1, time.Second, 1}, "size must be >= 0"},
		{Bucket{MaxSize + 1, time.Second, 1}, "size must be <="},
		{Bucket{1, 0, 1}, "drip_rate must be at least 1us"},
		{Bucket{1, 1500 * time.Nanosecond, 1}, "whole number of microseconds"},
		{Bucket{1, time.Second, 0}, "drip_size must be >= 1"},
		{Bucket{1, MaxDripRate, 1}, ""},
		{Bucket{1, MaxDripRate + time.Microsecond, 1}, "drip_rate must be at most"},
	}
	for _, c := range cases {
		err := c.bucket.Validate()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%v: unexpected error %v", c.bucket, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%v: got error %v, want one containing %q", c.bucket, err, c.want)
		}
	}
}
