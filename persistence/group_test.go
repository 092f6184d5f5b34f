package persistence

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// splitStore records, for each Write, the keys of its ops.
type splitStore struct {
	*Memory
	mu      sync.Mutex
	batches [][]string
}

func (s *splitStore) Write(ops []Op, sync bool) error {
	keys := make([]string, len(ops))
	for i, op := range ops {
		keys[i] = string(op.Key)
	}
	s.mu.Lock()
	s.batches = append(s.batches, keys)
	s.mu.Unlock()
	return s.Memory.Write(ops, sync)
}

// TestWriterGroupsLandInOneBatch: the changes enqueued between
// BeginGroup and EndGroup (a command's changes over several keys, as an
// audited decision and its audit entry) are written in one batch, while
// the writer takes batches as fast as it can and other producers
// enqueue ungrouped changes meanwhile.
func TestWriterGroupsLandInOneBatch(t *testing.T) {
	st := &splitStore{Memory: NewMemory()}
	w := NewWriter(st, FsyncAlways, quietLog) // a batch as soon as anything is queued
	ctx, cancel := context.WithCancel(context.Background())
	go w.Run(ctx)
	const producers, groups = 3, 2000
	var wg sync.WaitGroup
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v := strValue(8, 'x')
			for i := range groups {
				w.BeginGroup()
				w.Put(0, []byte(fmt.Sprintf("g%d:%d:a", p, i)), &v)
				runtime.Gosched() // let the writer try to take a batch here
				w.Put(0, []byte(fmt.Sprintf("g%d:%d:b", p, i)), &v)
				runtime.Gosched()
				w.Put(0, []byte(fmt.Sprintf("g%d:%d:c", p, i)), &v)
				w.EndGroup()
				w.Put(0, []byte(fmt.Sprintf("solo%d:%d", p, i)), &v)
			}
		}()
	}
	wg.Wait()
	waitWritten(t, w)
	cancel()
	w.Close()
	st.mu.Lock()
	defer st.mu.Unlock()
	members := 0
	for n, keys := range st.batches {
		open := map[string]int{} // group -> members seen in this batch
		for _, k := range keys {
			if g, ok := strings.CutSuffix(k, ":a"); ok {
				open[g] = 1
			} else if g, ok := strings.CutSuffix(k, ":b"); ok {
				open[g]++
			} else if g, ok := strings.CutSuffix(k, ":c"); ok {
				if open[g] != 2 {
					t.Fatalf("batch %d: group %s split across batches (its last change came with %d of the 2 before it)", n, g, open[g])
				}
				delete(open, g)
				members += 3
			}
		}
		for g := range open {
			t.Fatalf("batch %d ends inside group %s", n, g)
		}
	}
	if members != producers*groups*3 {
		t.Fatalf("%d grouped changes written, want %d", members, producers*groups*3)
	}
	t.Logf("%d groups of 3 changes and %d single changes from %d producers in %d batches, no group split",
		producers*groups, producers*groups, producers, len(st.batches))
}
