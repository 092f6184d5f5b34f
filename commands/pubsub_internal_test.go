package commands

import "testing"

// BenchmarkPublishUnsubscribed: PUBLISH to a channel nobody subscribes
// to, with no subscription at all (one atomic load) and with one on
// another channel and one pattern that does not match (read lock, map
// lookup, one glob match).
func BenchmarkPublishUnsubscribed(b *testing.B) {
	t := newPubsubTable()
	ch, msg := []byte("__sentinel__:hello"), []byte("payload")
	b.Run("empty", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			t.publish(ch, msg)
		}
	})
	cl := &client{}
	t.add(t.channels, &cl.pubsub.chans, cl, "other")
	t.add(t.patterns, &cl.pubsub.pats, cl, "news.*")
	b.Run("others", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			t.publish(ch, msg)
		}
	})
}
