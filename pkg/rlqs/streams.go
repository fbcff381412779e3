package rlqs

import (
	"cmp"
	"slices"
	"time"
)

// StreamView is one open stream, for the operator's page: its Envoy's
// address, its domain ("" before a first report), the buckets it reports
// and when it last reported one (zero before).
type StreamView struct {
	Peer       string
	Domain     string
	Buckets    int
	LastReport time.Time
}

// MaxListed bounds the streams and levels the page's views list.
const MaxListed = 100

// StreamViews returns the open streams, the most recently reporting first,
// at most MaxListed.
func (s *Service) StreamViews() []StreamView {
	out := []StreamView{}
	for _, st := range s.openStreams() {
		st.mu.Lock()
		v := StreamView{Peer: st.peer, Domain: st.domain, Buckets: len(st.subs)}
		for _, b := range st.subs {
			if b.lastAt.After(v.LastReport) {
				v.LastReport = b.lastAt
			}
		}
		st.mu.Unlock()
		out = append(out, v)
	}
	slices.SortFunc(out, func(a, b StreamView) int {
		return cmp.Or(b.LastReport.Compare(a.LastReport), cmp.Compare(a.Peer, b.Peer))
	})
	return out[:min(len(out), MaxListed)]
}

// LevelViews returns the levels the open streams' buckets meet, each as
// divided (top largest shares here), the most subscribed first, at most
// MaxListed.
func (s *Service) LevelViews(top int) []LevelSummary {
	keys := map[string]struct{}{}
	for _, st := range s.openStreams() {
		st.mu.Lock()
		for _, b := range st.subs {
			for _, l := range b.levels {
				keys[l.Key] = struct{}{}
			}
		}
		st.mu.Unlock()
	}
	out := []LevelSummary{}
	for k := range keys {
		if sum, ok := s.opts.Registry.Summary(k, top); ok {
			out = append(out, sum)
		}
	}
	slices.SortFunc(out, func(a, b LevelSummary) int {
		return cmp.Or(cmp.Compare(b.Subscribers, a.Subscribers), cmp.Compare(a.Key, b.Key))
	})
	return out[:min(len(out), MaxListed)]
}

// openStreams returns the streams open now.
func (s *Service) openStreams() []*stream {
	s.mu.Lock()
	defer s.mu.Unlock()
	streams := make([]*stream, 0, len(s.open))
	for st := range s.open {
		streams = append(streams, st)
	}
	return streams
}
