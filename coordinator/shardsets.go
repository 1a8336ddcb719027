package coordinator

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"
	"sync"

	"github.com/gorilla/mux"

	"github.com/crowdtrain/crowdtrain/dataset"
	"github.com/crowdtrain/crowdtrain/engine"
)

// shardSet is a data set cut into shards and encoded once, shared by every
// job that cuts the same data the same way (a sweep's trials, two jobs on
// MNIST): one copy in memory, and one URL per shard, so a worker that
// moves between such jobs keeps the shards it downloaded.
type shardSet struct {
	// key names the set in URLs: a hash of the encoded shards, so a URL
	// never names two contents (docs/API.md, Data).
	key    string
	shards []dataset.Shard
	bodies [][]byte
}

// shardSets are the server's shard sets by data set, shard size and seed.
// Safe for concurrent use.
type shardSets struct {
	mu    sync.Mutex
	byCut map[shardCut]*shardSet
	byKey map[string]*shardSet
}

type shardCut struct {
	train     *dataset.Set
	size      int
	seed      int64
	shardVers int
}

// get returns the shards of train cut into size examples with seed,
// encoding them the first time.
func (ss *shardSets) get(train *dataset.Set, size int, seed int64) *shardSet {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	cut := shardCut{train, size, seed, dataset.ShardVersion}
	if s := ss.byCut[cut]; s != nil {
		return s
	}
	s := cutShards(train, size, seed)
	if ss.byCut == nil {
		ss.byCut, ss.byKey = map[shardCut]*shardSet{}, map[string]*shardSet{}
	}
	ss.byCut[cut], ss.byKey[s.key] = s, s
	return s
}

func (ss *shardSets) byName(key string) *shardSet {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.byKey[key]
}

// cutShards encodes train's shards and names them by their contents.
func cutShards(train *dataset.Set, size int, seed int64) *shardSet {
	s := &shardSet{shards: dataset.MakeShards(train.N, size, seed)}
	s.bodies = make([][]byte, len(s.shards))
	h := sha256.New()
	for i, sh := range s.shards {
		s.bodies[i] = dataset.EncodeShard(train, sh)
		fmt.Fprintf(h, "%d:", len(s.bodies[i]))
		h.Write(s.bodies[i])
	}
	s.key = hex.EncodeToString(h.Sum(nil)[:10])
	return s
}

// dataShardPath is shard i's URL in set key, with the shard format: a
// cache keyed by URL (a browser's Cache Storage) never hands a worker
// bytes of another format.
func dataShardPath(key string, i int) string {
	return "/api/v1/data/" + key + "/shards/v" + strconv.Itoa(dataset.ShardVersion) + "/" + strconv.Itoa(i)
}

// handleDataShard serves GET /api/v1/data/{key}/shards/v{format}/{shard}.
// It is free for a client holding a lease of the shard in any job of the
// set, and charged to the anonymous budget otherwise.
func (s *Server) handleDataShard(w http.ResponseWriter, r *http.Request) {
	vars := mux.Vars(r)
	set := s.shardSets.byName(vars["key"])
	if set == nil {
		writeError(w, http.StatusNotFound, "no data set %q on this coordinator; leases name the shards to fetch", vars["key"])
		return
	}
	if f := vars["format"]; f != strconv.Itoa(dataset.ShardVersion) {
		writeError(w, http.StatusGone, "shard format %s is not served: this coordinator serves format %d; update the worker", f, dataset.ShardVersion)
		return
	}
	shard, err := strconv.Atoi(vars["shard"])
	if err != nil || shard < 0 || shard >= len(set.bodies) {
		writeError(w, http.StatusNotFound, "data set %s has shards 0..%d, not %q", set.key, len(set.bodies)-1, vars["shard"])
		return
	}
	var charged *Job // the job the bytes count for
	free := false
	for _, j := range s.jobList() {
		if j.shardSet != set {
			continue
		}
		if charged == nil {
			charged = j
		}
		if s.leaseHeldFrom(r.Context(), r, j, func(l *engine.Lease) bool { return l.Task.Shard == shard }) {
			charged, free = j, true
			break
		}
	}
	if charged == nil {
		writeError(w, http.StatusNotFound, "no job uses data set %s", set.key)
		return
	}
	s.serveImmutable(w, r, charged, servedShard, fmt.Sprintf(`"%s-f%d-%d"`, set.key, dataset.ShardVersion, shard), set.bodies[shard], free)
}
