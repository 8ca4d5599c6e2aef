package engine

import "hash/maphash"

// The shared n-gram pool: where a request's own tokens give no draft
// (lookup), what followed its last NgramMax tokens in any slot's cache
// of the same cache salt, in this request or an earlier one, is the
// draft (llama-server's ngram-mod has one such table for all). Requests
// that write what others wrote (a fixed answer format, a file quoted
// again, the same question asked twice) then draft from each other.
//
// It is a fixed table, indexed by a hash of the salt and the run of
// tokens, holding the token that last followed the run and a tag of the
// hash: learning a token is one write, a lookup one read a drafted
// token, and its memory does not grow with the traffic. A collision
// drafts a wrong token, which the request does not take. Keyed by the
// salt, it is shared where the prefix cache is (Request.CacheSalt): a
// request's drafts, and so its speed, depend only on what requests of
// its salt wrote.

// ngramPoolBits sizes the pool: 1<<ngramPoolBits entries of 8 bytes
// (2 MiB), a few times the tokens 16 slots of 4,096 hold.
const ngramPoolBits = 18

// poolBytes is the memory of the shared n-gram pool sp keeps: none
// without n-gram speculation.
func (sp Speculation) poolBytes() int64 {
	if !sp.Ngram {
		return 0
	}
	return 8 << ngramPoolBits
}

// ngramPool is the table; only the scheduler uses it.
type ngramPool struct {
	k    int // the length of a run
	seed maphash.Seed
	tags []uint32 // 0: empty
	next []int32
}

func newNgramPool(k int) *ngramPool {
	return &ngramPool{k: k, seed: maphash.MakeSeed(), tags: make([]uint32, 1<<ngramPoolBits), next: make([]int32, 1<<ngramPoolBits)}
}

// salt is the pool's key of a cache salt.
func (p *ngramPool) salt(s string) uint64 { return maphash.String(p.seed, s) }

// poolSalt is the pool's key of the slot's cache salt, hashed once per
// salt the slot holds, not every step.
func (sl *slot) poolSalt(p *ngramPool) uint64 {
	if !sl.saltHashed || sl.hashedSalt != sl.salt {
		sl.hashedSalt, sl.saltKey, sl.saltHashed = sl.salt, p.salt(sl.salt), true
	}
	return sl.saltKey
}

// slot is the index and tag of run under salt.
func (p *ngramPool) slot(salt uint64, run []int32) (int, uint32) {
	h := salt
	for _, t := range run {
		h ^= uint64(uint32(t))
		h *= 0x100000001b3
		h ^= h >> 29
	}
	return int(h & (1<<ngramPoolBits - 1)), uint32(h>>32) | 1
}

// learn records what followed each run of the slot's cache from its
// first token not yet learned (sl.pooled) on, under salt; a medium's
// placeholder is not recorded as what followed.
func (p *ngramPool) learn(sl *slot, salt uint64) {
	for i := max(sl.pooled, p.k); i < len(sl.cache); i++ {
		if isPlaceholder(sl.cache[i]) {
			continue
		}
		at, tag := p.slot(salt, sl.cache[i-p.k:i])
		p.tags[at], p.next[at] = tag, sl.cache[i]
	}
	sl.pooled = len(sl.cache)
}

// draft appends to dst at most n tokens that followed the last run of
// toks, and then of toks and the tokens drafted, under salt.
func (p *ngramPool) draft(dst, toks []int32, salt uint64, n int) []int32 {
	if len(toks) < p.k {
		return dst
	}
	from := len(dst)
	var buf [128]int32
	run := append(buf[:0], toks[len(toks)-p.k:]...)
	for len(dst)-from < n {
		at, tag := p.slot(salt, run[len(run)-p.k:])
		if p.tags[at] != tag || isPlaceholder(p.next[at]) {
			break
		}
		dst = append(dst, p.next[at])
		run = append(run, p.next[at])
	}
	return dst
}
