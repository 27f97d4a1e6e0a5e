/*
 * Shoal's query / I/O / task protocol as a Promela model (see tests/model/README.md).
 *
 * Every transition names the C++ function it mirrors in a tag: the word @mirrors, then
 * Class::Function, then the file. tests/model/check_names.sh (run by make model-check) fails
 * if one of them no longer exists in the code.
 *
 * Build switches (cpp, via spin -D...):
 *   CFG=n                   configuration (config.pml)
 *   DEADLINES=0|1           deadline expiry and cancellation events
 *   IOERR=0|1               reads may fail with an I/O error
 *   QUIESCE                 (with DEADLINES=1, liveness runs) the Canceller may stop for good
 *                           at any point: under weak fairness a Canceller that could still act
 *                           must act, so without this a liveness run would only check the runs
 *                           in which every request is cancelled and expired
 *   SHARE=0|1               search.share_scans (config.pml picks the default; 0: every entry
 *                           has exactly one ticket and there is no map)
 *   MAXQ=n                  search.max_queries_per_scan (config.pml; default NREQ: no cap)
 *   SEEDED_BLOCKING_TASK    the seed's bug: a scan task waits inside the arena for the next
 *                           ready partition (Lance's blocking_recv in spawn_cpu)
 *   SEEDED_NO_OVERBUDGET    IoPolicy::Dispatch without the oldest query's over-budget read
 *   SEEDED_WAIT_IN_TASK     the seed's wait written inside a task's d_step: spin must report
 *                           "block in d_step" (the check behind "no arena task ever waits")
 *   SEEDED_REISSUE_STALE    SharedScan::Deliver re-issues without taking the live ticket's
 *                           PartitionFetch (issuer_ stays the stopped one): a re-issue that does
 *                           not consume a stopped issuer (in the code, a Deliver/Issue loop)
 *   SEEDED_NO_UNCACHED_FORCED  UncachedBudget::GrantLocked without the oldest query's grant
 *                           past the budget, with a partition larger than cache.uncached_bytes
 *   SEEDED_REISSUE_CAP=n    Deliver's old cap (before 5d7e6a9): at most n re-issues per entry,
 *                           then every ticket fails, a live one too
 */

/* cache entry states (used by config.pml's Setup) */
#define ABSENT 0
#define LOADING 1
#define CACHED 2

#include "config.pml"

#ifndef DEADLINES
#define DEADLINES 0
#endif
#ifndef IOERR
#define IOERR 0
#endif
#ifndef SHARE
#define SHARE 0
#endif
#ifndef MAXQ
#define MAXQ NREQ
#endif
#ifndef NSTOP
#define NSTOP NREQ           /* requests 0 .. NSTOP-1 may expire or be cancelled (config.pml) */
#endif

#define NI 3                 /* work items per request, at most */
#define NRI (NREQ * NI)      /* (request, item) pairs */
#define NRD NRI              /* read slots: one read per pending fetch, at most */
#define NSUB (QD + 1)        /* submissions: the queue depth plus the one forced read */
#define TQ 10                /* arena queue bound (model bound, asserted) */
#define WL 16                /* inline callback work list bound (model bound, asserted) */
#define NONE 255

/* ---- IvfSearchJob state (core/index/ivf_search.cc), per request ---- */
byte plan[NRI];              /* partition of item i of request r: plan[r*NI+i] (set by config) */
byte nplan[NREQ];
bool arrived[NREQ], routed[NREQ], failed[NREQ], finishing[NREQ], csrc[NREQ], answered[NREQ];
bool cancelled[NREQ], expired[NREQ];
byte nitems[NREQ], next_fetch[NREQ], fif[NREQ], issuing[NREQ], nact[NREQ], scanned[NREQ];
byte pinned[NREQ];
byte rq[NRI];                /* ready_: a FIFO of item indices per request */
byte nrq[NREQ];
/* item states (model bookkeeping, for the invariants) */
#define IDLE 0
#define FETCHING 1
#define READY 2
#define TAKEN 3
#define DONE 4
byte ist[NRI];
#define PIN_NONE 0
#define PIN_CACHE 1
#define PIN_BUFFER 2
byte ipin[NRI];

/* ---- ScanShare / SharedScan (core/index/scan_share.cc) ----
   A job's work item (r, i) registers a ticket; entry e is the one entry ticket e = r*NI+i led
   (made by Register), so entries need no allocator and a ticket leads at most one. */
#define ES_FREE 0
#define ES_FETCH 1           /* its fetch is outstanding (may be re-issued) */
#define ES_HELD 2             /* a job accepted its data: a ReadyItem in that job's ready_ or scan */
byte est[NRI];               /* entry state */
bool ecl[NRI];               /* closed (ScanShare::Close): nobody joins, ticket list frozen */
short etk[NRI];              /* tickets registered and not answered (bit r*NI+i), not the accepted one */
byte eacc[NRI];              /* the ticket whose job accepted the data, + 1 (0: none) */
byte ftk[NRI];               /* the issuer: whose PartitionFetch (query, rank, token) its fetch carries */
byte eq[NRI];                /* queries_: queries of every ticket ever registered (the cap's count) */
byte tent[NRI];              /* the entry a ticket is registered on, + 1 (0: none) */
byte emap[NP];               /* ScanShare's map: partition -> its open entry + 1 (0: none) */

/* ---- PartitionCache (storage/cache/partition_cache.cc) ---- */
byte cst[NP], cpins[NP];
byte cused;
short cwait[NP];             /* waiters of a load: bit e (an entry's fetch) */

/* ---- UncachedBudget (storage/cache/uncached_budget.cc), cache.uncached_bytes = UB ----
   An entry's uncached read acquires its partition's bytes before it is issued and returns them
   when its pin (PIN_BUFFER) is dropped. Entry e's read is keyed by its issuer's query
   (ftk[e] / NI: the fetch's query_seq, fixed while the read waits or holds its grant). Held
   bytes, and bytes held per query, are sums over the granted entries (no extra state). */
short uwait;                 /* waiting_: bit e, entry e's uncached read waits for bytes */
short ugr;                   /* granted: bit e, entry e's read (or the pin of its data) holds a grant */
byte uforced;                /* forced_out_: the entry holding the over-budget grant + 1 (0: none) */
bool uowed;                  /* GrantLocked is owed: Settle runs it before anything else */
byte ua, ub, uh, uq;         /* scratch (UGrant) */

/* ---- IoPolicy / IoScheduler (storage/sched) ---- */
#define FREE 0
#define QUEUED 1
#define FLYING 2
#define ANSWERED 3
#define LOAD 0               /* a cache load (Segment::FetchAttempt's loader) */
#define DIRECT 1             /* an uncached read for one query (cache full) */
byte rd_st[NRD], rd_own[NRD], rd_p[NRD], rd_rank[NRD], rd_item[NRD], rd_kind[NRD], rd_sub[NRD];
bool sub_st[NSUB];
byte sub_len[NSUB];
byte nsub, iob, forced;      /* submissions in flight, bytes in flight, forced sub + 1 (0 none) */
byte qinfl[NREQ];            /* in_flight_per_query_ */
/* ghosts: which paths a run reached (make model-check asserts each is reachable, -DCOVER) */
bool forced_seen, direct_seen, coalesced_seen, evicted_seen, retry_seen, hit_seen, attach_seen;
bool batch2_seen, tasks2_seen, expired_seen, cancelq_seen;
bool failed_retry_seen;      /* a request that already failed re-fetches (see README) */
bool join_seen, younger_seen, cap_seen, handback_seen, leave_seen, reissue_seen, passon_seen;
bool refuse_seen, nobody_seen, failshared_seen;
bool reissue2_seen;          /* one entry's fetch re-issued twice (two stopped issuers) */
bool uwait_seen, uforced_seen;   /* an uncached read waited for bytes; a grant past the budget */
/* ghost for the re-issue argument (SharedScan::Deliver has no cap): the issuers each entry's
   re-issues consumed (bit = ticket) */
short reiss[NRI];

/* ---- TbbExecutor arena queue ---- */
#define T_ROUTE 0
#define T_SCAN 1
#define T_FINISH 2
#define T_MAINT 3
byte tq[TQ], ntq;
bool maint_done;

/* ---- inline callbacks run on the current thread before its step ends ---- */
#define E_FETCH 0            /* arg: r*NI+i */
#define E_ISSUED 1           /* arg: r */
#define E_RANS_OK 2          /* arg: read slot */
#define E_RANS_STOP 3        /* arg: read slot; CANCELLED or DEADLINE_EXCEEDED */
#define E_RANS_IOERR 4       /* arg: read slot */
#define E_REFETCH 5          /* arg: entry; its fetch again (re-issue, or a cache load's retry) */
#define E_GRANT 6            /* arg: entry; its uncached read's grant (UncachedBudget's answer) */
byte wl[WL], nwl;
#define DL 8                 /* pending SharedScan::Deliver calls (model bound, asserted) */
byte dl[DL], ndl;            /* e * 16 + (how - E_RANS_OK) * 4 + pin; run next, last first */
byte pp;                     /* Progress(r) owed: bit r */

/* scratch for the d_step bodies (reset at every step's end, so it adds no states) */
byte xi, xj, xk, xp, ys, yr, xe, xend, xbest, xnew;
bool xok, xstop;
byte xnf, xtasks;
bool xcs, xstage, sok;
byte es, et, fr, fi2;      /* Settle's event; Register's (r, i) */
byte zt, zl, ze, zc, zf, zd, zi;   /* scan-share scratch (Deliver: zt zl; the callers: the rest) */
bool zacc, zok;
byte psize[NP], poff[NP];  /* partition sizes and offsets in lists.dat (set by config) */

#define TOKEN_BAD(r) (cancelled[r] || expired[r])   /* CancelToken::Check() != OK */
#define RI(r, i) ((r) * NI + (i))
#define SIZE(r, i) psize[plan[RI(r, i)]]

inline wl_push(ev) {
  assert(nwl < WL);
  wl[nwl] = ev;
  nwl++
}

/* A fetch's answer for entry e: SharedScan::Deliver runs before anything else the thread
   still owes (as if called inline where it is pushed). */
inline dl_push(e, how, pin) {
  assert(ndl < DL);
  dl[ndl] = (e) * 16 + ((how) - E_RANS_OK) * 4 + (pin);
  ndl++
}

inline tq_push(t) {
  /* @mirrors TbbExecutor::Submit core/exec/tbb_executor.cc : enqueue never blocks */
  assert(ntq < TQ);
  tq[ntq] = t;
  ntq++
}

/* @mirrors IvfSearchJob::FailLocked core/index/ivf_search.cc */
inline FailLocked(r) {
  if
  :: !failed[r] -> csrc[r] = 1
  :: else -> skip
  fi;
  failed[r] = 1
}

/* @mirrors PartitionCache::MakeRoomLocked storage/cache/partition_cache.cc
   Evicts unpinned cached entries (lowest index first: S3-FIFO's order is abstracted) until
   `need` more bytes fit; xok = fits. With `ifroom` (kIfRoom) nothing is evicted for a read
   that cannot fit next to the pinned and loading bytes: it is refused at once. */
inline MakeRoom(need, ifroom) {
  xok = 1;
  if
  :: ifroom ->
     xbest = 0;
     xk = 0;
     do
     :: xk < NP && (cst[xk] == LOADING || (cst[xk] == CACHED && cpins[xk] > 0)) ->
        xbest = xbest + psize[xk]; xk++
     :: xk < NP && !(cst[xk] == LOADING || (cst[xk] == CACHED && cpins[xk] > 0)) -> xk++
     :: else -> break
     od;
     if
     :: xbest + need > CACHEB -> xok = 0
     :: else -> skip
     fi
  :: else -> skip
  fi;
  do
  :: !xok -> break
  :: xok && cused + need <= CACHEB -> break
  :: else ->
     xbest = NONE;
     xk = 0;
     do
     :: xk < NP && xbest == NONE && cst[xk] == CACHED && cpins[xk] == 0 -> xbest = xk
     :: xk < NP -> xk++
     :: else -> break
     od;
     if
     :: xbest == NONE -> xok = 0; break   /* everything left is pinned or loading */
     :: else -> cst[xbest] = ABSENT; cused = cused - psize[xbest]; evicted_seen = 1   /* EvictOneLocked */
     fi
  od;
  xk = 0; xbest = 0
}

/* @mirrors UncachedBudget::GrantLocked storage/cache/uncached_budget.cc
   Grants waiting reads from the head (oldest query first; within one query, the model takes
   entry order for arrival order) while they fit in UB; past it, only a head whose query holds
   nothing, and only if no over-budget grant is alive. Acquire, Release and CancelQuery set
   `uowed`; Settle runs this before anything else the thread owes (so within the same step,
   as the code does it inside those calls), and the answers run after it from the work list
   (@mirrors UncachedBudget::Run storage/cache/uncached_budget.cc: a loop, not a recursion). */
inline UGrant() {
  do
  :: uwait == 0 -> break
  :: else ->
     ub = NONE;   /* waiting_.begin() */
     ua = 0;
     do
     :: ua < NRI ->
        if
        :: (uwait & (1 << ua)) != 0 && (ub == NONE || ftk[ua] / NI < ftk[ub] / NI) -> ub = ua
        :: else -> skip
        fi;
        ua++
     :: else -> break
     od;
     uh = 0; uq = 0;   /* held_bytes, held_by_query_[head's query] */
     ua = 0;
     do
     :: ua < NRI ->
        if
        :: (ugr & (1 << ua)) != 0 ->
           uh = uh + psize[plan[ua]];
           uq = uq + (ftk[ua] / NI == ftk[ub] / NI -> psize[plan[ua]] : 0)
        :: else -> skip
        fi;
        ua++
     :: else -> break
     od;
     if
#ifdef SEEDED_NO_UNCACHED_FORCED
     :: uh + psize[plan[ub]] > UB ->
        printf("MSC: uncached budget: r%d's read of P%d waits for bytes\n", ftk[ub] / NI, plan[ub]);
        break
#else
     :: uh + psize[plan[ub]] > UB && (uforced != 0 || uq > 0) -> uwait_seen = 1; break
#endif
     :: uh + psize[plan[ub]] > UB && !(uforced != 0 || uq > 0) ->
        uforced = ub + 1; uforced_seen = 1;
        printf("MSC: uncached budget: r%d's read of P%d granted past the budget\n", ftk[ub] / NI, plan[ub])
     :: else -> skip
     fi;
     uwait = uwait & ~(1 << ub);
     ugr = ugr | (1 << ub);
     wl_push(E_GRANT * 32 + ub)
  od;
  ua = 0; ub = 0; uh = 0; uq = 0
}

/* ~Token: @mirrors UncachedBudget::Release storage/cache/uncached_budget.cc */
inline URelease(e) {
  assert((ugr & (1 << (e))) != 0);
  ugr = ugr & ~(1 << (e));
  if
  :: uforced == (e) + 1 -> uforced = 0
  :: else -> skip
  fi;
  uowed = 1   /* GrantLocked, run by Settle before anything else */
}

/* @mirrors UncachedBudget::CancelQuery storage/cache/uncached_budget.cc: r's waiting reads
   answer CANCELLED on this thread; the head may have changed. */
inline UCancelQuery(r) {
  ua = 0; uh = 0;
  do
  :: ua < NRI ->
     if
     :: (uwait & (1 << ua)) != 0 && ftk[ua] / NI == r ->
        uwait = uwait & ~(1 << ua); uh = 1;
        dl_push(ua, E_RANS_STOP, PIN_NONE)
     :: else -> skip
     fi;
     ua++
  :: else -> break
  od;
  if
  :: uh -> uowed = 1
  :: else -> skip
  fi;
  ua = 0; uh = 0
}

/* ~PartitionHandle: @mirrors PartitionCache::Unpin storage/cache/partition_cache.cc
   A pin of partition p: PIN_CACHE (a cache entry), PIN_BUFFER (an uncached read's buffer,
   freed), PIN_NONE. */
inline UnpinP(p, pin, e) {
  if
  :: pin == PIN_BUFFER -> URelease(e)   /* ~UncachedPin: the buffer and its grant */
  :: pin == PIN_CACHE ->
     assert(cpins[p] > 0);
     cpins[p]--;
     if
     :: cpins[p] == 0 && cused > CACHEB -> MakeRoom(0, 0)
     :: else -> skip
     fi
  :: else -> skip
  fi
}

inline Unpin(ri, e) {
  UnpinP(plan[ri], ipin[ri], e);
  ipin[ri] = PIN_NONE
}

/* The thread that changed job r's state owes it a Progress call, unless a fetch of r is being
   issued (issuing_ > 0: the issuer calls Progress when it is done). */
inline ProgressOwed(r) {
  if
  :: issuing[r] == 0 -> pp = pp | (1 << r)
  :: else -> skip
  fi
}

/* A registered ticket t of entry e counts as answered for its job, exactly once: in-flight--,
   its work's pinned bytes released, scanned++. (OnHandBack, Leave, FailShared, or AcceptShared
   refusing.) @mirrors IvfSearchJob::TicketAnsweredLocked core/index/ivf_search.cc */
inline TicketDone(t, e) {
  assert(ist[t] == FETCHING && tent[t] == e + 1 && (etk[e] & (1 << t)) != 0);
  assert(fif[t / NI] > 0 && pinned[t / NI] >= psize[plan[t]]);
  etk[e] = etk[e] & ~(1 << t);
  tent[t] = 0;
  fif[t / NI]--;
  pinned[t / NI] = pinned[t / NI] - psize[plan[t]];
  scanned[t / NI]++;
  ist[t] = DONE
}

/* @mirrors ScanShare::Close core/index/scan_share.cc: out of the map (if the slot is still
   this entry); the ticket list is frozen, nobody joins any more. */
inline Close(e) {
  if
  :: emap[plan[e]] == e + 1 -> emap[plan[e]] = 0
  :: else -> skip
  fi;
  ecl[e] = 1
}

/* The entry is done: no ticket left, its data scanned or dropped. */
inline FreeEntry(e) {
  assert(etk[e] == 0);
  if
  :: emap[plan[e]] == e + 1 -> emap[plan[e]] = 0
  :: else -> skip
  fi;
  est[e] = ES_FREE; ecl[e] = 0; eacc[e] = 0; ftk[e] = 0; eq[e] = 0; reiss[e] = 0
}

/* @mirrors SharedScan::Deliver core/index/scan_share.cc (the fetch's callback; I/O thread or
   inline; also a job passing on data it accepted and will not scan). Data: offered to the
   tickets oldest first, each leaving the entry whatever its job answers; the first job that
   accepts holds it in a ReadyItem; nobody left: the entry closes, the pin is dropped.
   CANCELLED / DEADLINE_EXCEEDED because the issuer stopped (its token, or it left) while some
   ticket's token is fine: @mirrors SharedScan::Issue core/index/scan_share.cc again with the
   oldest live ticket's PartitionFetch (no cap: each re-issue needs its issuer to stop, and a
   stopped ticket is never chosen again; asserted below: fewer re-issues than tickets ever
   registered). Else the entry closes and every ticket's job gets FailShared. */
inline Deliver(e, how, pin) {
  assert(est[e] == ES_FETCH || (est[e] == ES_HELD && eacc[e] == 0 && !ecl[e]));
  if
  :: how == E_RANS_OK ->
     zacc = 0;
     do
     :: etk[e] == 0 -> break
     :: else ->
        zt = 0;   /* the oldest ticket: query_seq = r, one ticket per request in an entry */
        do
        :: (etk[e] & (1 << zt)) == 0 -> zt++
        :: else -> break
        od;
        if
        :: failed[zt / NI] ->
           /* @mirrors IvfSearchJob::AcceptShared core/index/ivf_search.cc: false, the job
              failed; it counts its ticket answered and the ticket leaves */
           printf("MSC: r%d refuses P%d (failed)\n", zt / NI, plan[e]);
           TicketDone(zt, e); refuse_seen = 1;
           ProgressOwed(zt / NI)
        :: else ->
           /* AcceptShared: true; the job's ReadyItem holds the data and the entry
              (@mirrors IvfSearchJob::OnFetched core/index/ivf_search.cc, bookkeeping only) */
           assert(ist[zt] == FETCHING && tent[zt] == e + 1 && fif[zt / NI] > 0);
           etk[e] = etk[e] & ~(1 << zt);
           eacc[e] = zt + 1;
           est[e] = ES_HELD;
           fif[zt / NI]--;
           printf("MSC: r%d's P%d is ready (%d ready)\n", zt / NI, plan[e], nrq[zt / NI] + 1);
           rq[RI(zt / NI, nrq[zt / NI])] = zt % NI;
           nrq[zt / NI]++;
           ist[zt] = READY;
           ipin[zt] = pin;
           ProgressOwed(zt / NI);
           zacc = 1;
           break
        fi
     od;
     if
     :: !zacc ->
        printf("MSC: nobody takes P%d: dropped\n", plan[e]);
        nobody_seen = 1;
        UnpinP(plan[e], pin, e);
        FreeEntry(e)
     :: else -> skip
     fi
  :: else ->
     zl = NONE;   /* the oldest ticket whose own token is fine */
     zt = 0;
     do
     :: zt < NRI ->
        if
        :: zl == NONE && (etk[e] & (1 << zt)) != 0 && !TOKEN_BAD(zt / NI) -> zl = zt
        :: else -> skip
        fi;
        zt++
     :: else -> break
     od;
     zc = 0;   /* re-issues of this entry so far (= issuers consumed) */
     zt = 0;
     do
     :: zt < NRI -> zc = zc + ((reiss[e] & (1 << zt)) != 0 -> 1 : 0); zt++
     :: else -> break
     od;
     if
     :: how == E_RANS_STOP && zl != NONE &&
#ifdef SEEDED_REISSUE_CAP
        zc < SEEDED_REISSUE_CAP &&   /* the old kMaxReissues */
#endif
        (TOKEN_BAD(ftk[e] / NI) || (etk[e] & (1 << ftk[e])) == 0) ->   /* IssuerStoppedLocked */
        printf("MSC: P%d's fetch stopped: issued again for r%d\n", plan[e], zl / NI);
        reissue_seen = reissue_seen || ftk[e] != zl;
        /* The argument for no cap: every re-issue consumes a stopped issuer that no re-issue of
           this entry consumed before (a stopped ticket never becomes live again), so an entry
           re-issues at most (tickets ever registered - 1) times: re-issues <= stopped issuers. */
        assert((reiss[e] & (1 << ftk[e])) == 0);
        reiss[e] = reiss[e] | (1 << ftk[e]);
        assert(zl != ftk[e] && (reiss[e] & (1 << zl)) == 0);
        zc++;
        assert(zc < eq[e]);   /* at most one per ticket ever registered, the live one excluded */
        reissue2_seen = reissue2_seen || zc >= 2;
#ifndef SEEDED_REISSUE_STALE
        ftk[e] = zl;
#endif
        wl_push(E_REFETCH * 32 + e)
     :: else ->
        printf("MSC: P%d's fetch fails: every ticket fails\n", plan[e]);
        do
        :: etk[e] == 0 -> break
        :: else ->
           zt = 0;
           do
           :: (etk[e] & (1 << zt)) == 0 -> zt++
           :: else -> break
           od;
           /* @mirrors IvfSearchJob::FailShared core/index/ivf_search.cc */
           failshared_seen = failshared_seen || etk[e] != (1 << zt);
           /* another request's stop never fails a live ticket: a fetch that answers
              CANCELLED / DEADLINE_EXCEEDED fails only tickets whose own token stopped (a live
              one gets a re-issue); only an I/O error fails a ticket whose token is fine */
           assert(how == E_RANS_IOERR || TOKEN_BAD(zt / NI));
           TicketDone(zt, e);
           FailLocked(zt / NI);
           ProgressOwed(zt / NI)
        od;
        FreeEntry(e)
     fi
  fi;
  zt = 0; zl = 0; zacc = 0; zc = 0
}

/* @mirrors ScanShare::Register core/index/scan_share.cc
   @mirrors IvfSearchJob::StartFetch core/index/ivf_search.cc (then, if it leads, Issue)
   Join the open entry for the partition if its oldest ticket is at least as old as this one
   and its queries stay within max_queries_per_scan; else lead a new entry (in the map only
   when sharing is on; it replaces the slot) and issue its fetch with this ticket's priority. */
inline Register(r, i) {
  assert(ist[RI(r, i)] == FETCHING && tent[RI(r, i)] == 0);
  zok = 0;
  zf = NONE;
#if SHARE
  if
  :: emap[plan[RI(r, i)]] != 0 ->
     ze = emap[plan[RI(r, i)]] - 1;
     assert(est[ze] != ES_FREE && !ecl[ze]);
     if
     :: ftk[ze] / NI > r -> younger_seen = 1   /* oldest_seq_ (the issuer's): never ride a younger query */
     :: ze / NI <= r && eq[ze] + 1 > MAXQ -> cap_seen = 1   /* queries_ + n > max_queries_per_scan */
     :: else -> zok = 1
     fi
  :: else -> skip
  fi;
#endif
  if
  :: zok ->
     printf("MSC: r%d joins the scan of P%d (entry of r%d)\n", r, plan[RI(r, i)], ze / NI);
     join_seen = 1;
     etk[ze] = etk[ze] | (1 << RI(r, i));
     eq[ze]++;
     tent[RI(r, i)] = ze + 1
  :: else ->
     zf = RI(r, i);
     assert(est[zf] == ES_FREE);
     est[zf] = ES_FETCH; etk[zf] = (1 << zf); ftk[zf] = zf; tent[zf] = zf + 1; eq[zf] = 1;
#if SHARE
     emap[plan[zf]] = zf + 1;
#endif
     skip   /* the caller issues the entry's fetch: FetchAttempt(zf) */
  fi;
  zok = 0; ze = 0
}

/* @mirrors IvfSearchJob::OnHandBack core/index/ivf_search.cc: the scanning task gives a
   joiner its candidates; under the joiner's lock: merge, release, in-flight--, scanned++;
   then Progress outside the lock (unless a fetch is being issued). */
inline OnHandBack(t, e) {
  printf("MSC: r%d gets P%d's results handed back\n", t / NI, plan[e]);
  handback_seen = 1;
  TicketDone(t, e);
  ProgressOwed(t / NI)
}

/* A job's ReadyItem (ticket t, entry e) it will not scan (it failed, or its token went bad
   before the scan): item.entry->Deliver(data) again, without Close (the entry is open, its own
   ticket already left it): the remaining tickets, oldest first, or nobody and the pin drops. */
inline PassOn(t, e) {
  assert(eacc[e] == t + 1 && est[e] == ES_HELD && !ecl[e]);
  eacc[e] = 0;
  tent[t] = 0;
  printf("MSC: r%d passes P%d on\n", t / NI, plan[e]);
  passon_seen = passon_seen || etk[e] != 0;
  dl_push(e, E_RANS_OK, ipin[t]);   /* the pin moves to the entry, then to a taker */
  ipin[t] = PIN_NONE
}

/* @mirrors IoPolicy::Dispatch storage/sched/io_policy.cc
   @mirrors IoScheduler::DispatchLocked storage/sched/io_scheduler.cc
   Order: deadline, query, rank (deadlines are the same timeout for every request, so deadline
   order is arrival order and expiry follows it). */
inline Dispatch() {
  /* expired reads (a prefix of the queue) are dropped and answered DEADLINE_EXCEEDED */
  ys = 0;
  do
  :: ys < NRD ->
     if
     :: rd_st[ys] == QUEUED && expired[rd_own[ys]] ->
        rd_st[ys] = ANSWERED; wl_push(E_RANS_STOP * 32 + ys); expired_seen = 1
     :: else -> skip
     fi;
     ys++
  :: else -> break
  od;
  do
  :: true ->
     /* head: the smallest (query, rank) queued */
     xbest = NONE;
     ys = 0;
     do
     :: ys < NRD ->
        if
        :: rd_st[ys] == QUEUED && (xbest == NONE || rd_own[ys] * NI + rd_rank[ys] < rd_own[xbest] * NI + rd_rank[xbest]) -> xbest = ys
        :: else -> skip
        fi;
        ys++
     :: else -> break
     od;
     if
     :: xbest == NONE -> break
     :: else -> skip
     fi;
     /* a free submission slot */
     xe = 0;
     do
     :: xe < NSUB && sub_st[xe] -> xe++
     :: else -> break
     od;
     if
     :: nsub < QD && iob + psize[rd_p[xbest]] <= IOB ->   /* @mirrors IoPolicy::MayStart storage/sched/io_policy.cc */
        assert(xe < NSUB);
        /* @mirrors IoPolicy::Coalesce storage/sched/io_policy.cc: adjacent queued ranges of the
           file, offset order, within max_request_bytes and the bytes budget */
        xend = poff[rd_p[xbest]] + psize[rd_p[xbest]];
        rd_st[xbest] = FLYING; rd_sub[xbest] = xe; qinfl[rd_own[xbest]]++;
        xstop = 0;
        xp = rd_p[xbest];
        do
        :: xp < NP && !xstop ->
           ys = 0;
           do
           :: ys < NRD && !xstop ->
              if
              :: rd_st[ys] == QUEUED && rd_p[ys] == xp ->
                 if
                 :: poff[xp] > xend -> xstop = 1   /* a gap */
                 :: else ->
                    xnew = (xend > poff[xp] + psize[xp] -> xend : poff[xp] + psize[xp]);
                    if
                    :: xnew - poff[rd_p[xbest]] > MAXREQB -> xstop = 1
                    :: iob + (xnew - poff[rd_p[xbest]]) > IOB -> xstop = 1
                    :: else ->
                       xend = xnew; coalesced_seen = 1;
                       rd_st[ys] = FLYING; rd_sub[ys] = xe; qinfl[rd_own[ys]]++
                    fi
                 fi
              :: else -> skip
              fi;
              ys++
           :: else -> break
           od;
           xp++
        :: else -> break
        od;
        sub_len[xe] = xend - poff[rd_p[xbest]];
        printf("MSC: dispatch: read of P%d (+ adjacent) goes in flight, size %d\n", rd_p[xbest], sub_len[xe])
     :: else ->
#ifdef SEEDED_NO_OVERBUDGET
        printf("MSC: dispatch: r%d's read of P%d is over the budget and waits\n", rd_own[xbest], rd_p[xbest]);
        break
#else
        /* Over budget: the oldest query with queued reads and nothing in flight gets its next
           read, alone; one forced read at a time. */
        if
        :: forced != 0 -> break
        :: else -> skip
        fi;
        yr = NONE;   /* by_query_.begin(): the oldest query with queued reads */
        ys = 0;
        do
        :: ys < NRD ->
           if
           :: rd_st[ys] == QUEUED && (yr == NONE || rd_own[ys] < yr) -> yr = rd_own[ys]
           :: else -> skip
           fi;
           ys++
        :: else -> break
        od;
        if
        :: qinfl[yr] > 0 -> break
        :: else -> skip
        fi;
        xbest = NONE;   /* its first read in key order */
        ys = 0;
        do
        :: ys < NRD ->
           if
           :: rd_st[ys] == QUEUED && rd_own[ys] == yr && (xbest == NONE || rd_rank[ys] < rd_rank[xbest]) -> xbest = ys
           :: else -> skip
           fi;
           ys++
        :: else -> break
        od;
        assert(xe < NSUB);
        rd_st[xbest] = FLYING; rd_sub[xbest] = xe; qinfl[yr]++;
        sub_len[xe] = psize[rd_p[xbest]];
        forced = xe + 1;
        forced_seen = 1;
        printf("MSC: dispatch: over budget, oldest query r%d's read of P%d forced\n", yr, rd_p[xbest])
#endif
     fi;
     sub_st[xe] = 1;
     nsub++;
     iob = iob + sub_len[xe]
  od;
  ys = 0; xe = 0; xbest = 0; xend = 0; xnew = 0; xp = 0; yr = 0; xstop = 0
}

/* @mirrors IoScheduler::Read storage/sched/io_scheduler.cc (queue, then dispatch) */
inline Read(kind, own, p, i, e) {
  ys = 0;
  do
  :: ys < NRD && rd_st[ys] != FREE -> ys++
  :: else -> break
  od;
  assert(ys < NRD);
  rd_st[ys] = QUEUED; rd_own[ys] = own; rd_p[ys] = p; rd_rank[ys] = i; rd_item[ys] = e;
  rd_kind[ys] = kind; rd_sub[ys] = 0;
  printf("MSC: r%d queues a read of P%d (uncached=%d)\n", own, p, kind);
  Dispatch()
}

/* @mirrors IoScheduler::CancelQuery storage/sched/io_scheduler.cc
   @mirrors IoPolicy::CancelQuery storage/sched/io_policy.cc
   Queued reads of `r` answer CANCELLED on this thread; reads in flight complete normally. */
inline CancelQuery(r) {
  xok = 0;
  xi = 0;
  do
  :: xi < NRD ->
     if
     :: rd_st[xi] == QUEUED && rd_own[xi] == r ->
        rd_st[xi] = ANSWERED; wl_push(E_RANS_STOP * 32 + xi); xok = 1; cancelq_seen = 1
     :: else -> skip
     fi;
     xi++
  :: else -> break
  od;
  if
  :: xok -> Dispatch()   /* the oldest query may have changed (I-4) */
  :: else -> skip
  fi;
  xi = 0; xok = 0
}

/* @mirrors Segment::FetchAttempt storage/collection/segment.cc
   @mirrors PartitionCache::Get storage/cache/partition_cache.cc
   Entry e's fetch, with the PartitionFetch of ticket ftk[e] (its query, rank and token).
   Hit: pinned at once. Loading: attach (single flight). Miss with room: a cache load read with
   this query's priority. No room next to the pins (kIfRoom refused): an uncached read. */
inline FetchAttempt(e) {
  xp = plan[e];
  if
  :: TOKEN_BAD(ftk[e] / NI) -> dl_push(e, E_RANS_STOP, PIN_NONE)
  :: !TOKEN_BAD(ftk[e] / NI) && cst[xp] == LOADING -> cwait[xp] = cwait[xp] | (1 << e); attach_seen = 1
  :: !TOKEN_BAD(ftk[e] / NI) && cst[xp] == CACHED -> cpins[xp]++; hit_seen = 1; dl_push(e, E_RANS_OK, PIN_CACHE)
  :: !TOKEN_BAD(ftk[e] / NI) && cst[xp] == ABSENT ->
     MakeRoom(psize[xp], 1);
     if
     :: xok ->
        cst[xp] = LOADING; cused = cused + psize[xp]; cwait[xp] = (1 << e);
        Read(LOAD, ftk[e] / NI, xp, ftk[e] % NI, e)   /* Segment::ReadPartition through the loader */
     :: else ->
        /* RESOURCE_EXHAUSTED: @mirrors Segment::ReadUncached storage/collection/segment.cc,
           which first acquires the bytes: @mirrors UncachedBudget::Acquire storage/cache/uncached_budget.cc */
        direct_seen = 1;
        uwait = uwait | (1 << e);
        uowed = 1   /* Acquire's GrantLocked, run by Settle before anything else */
     fi
  fi;
  xp = 0; xok = 0
}

/* @mirrors PartitionCache::OnLoaded storage/cache/partition_cache.cc (and the Get callbacks in
   Segment::FetchAttempt: a load another query's stop ended is retried, StoppedByAnotherQuery,
   when the waiting fetch's own token is fine) */
inline OnLoaded(p, how) {
  xj = 0;
  if
  :: how == E_RANS_OK ->
     cst[p] = CACHED;
     do
     :: xj < NRI ->
        if
        :: cwait[p] & (1 << xj) -> cpins[p]++; dl_push(xj, E_RANS_OK, PIN_CACHE)
        :: else -> skip
        fi;
        xj++
     :: else -> break
     od
  :: else ->
     cst[p] = ABSENT;
     cused = cused - psize[p];
     do
     :: xj < NRI ->
        if
        :: (cwait[p] & (1 << xj)) && how == E_RANS_STOP && !TOKEN_BAD(ftk[xj] / NI) ->
           wl_push(E_REFETCH * 32 + xj); retry_seen = 1;   /* retry with a read of its own */
           failed_retry_seen = failed_retry_seen || failed[ftk[xj] / NI]
        :: (cwait[p] & (1 << xj)) && !(how == E_RANS_STOP && !TOKEN_BAD(ftk[xj] / NI)) ->
           dl_push(xj, how, PIN_NONE)
        :: else -> skip
        fi;
        xj++
     :: else -> break
     od
  fi;
  cwait[p] = 0;
  xj = 0
}

/* A read's answer, run after the scheduler's lock is released.
   @mirrors Segment::ReadPartition storage/collection/segment.cc */
inline ReadAnswer(s, how) {
  assert(rd_st[s] == ANSWERED);
  if
  :: rd_kind[s] == LOAD -> OnLoaded(rd_p[s], how)
  :: rd_kind[s] == DIRECT && how == E_RANS_OK -> dl_push(rd_item[s], E_RANS_OK, PIN_BUFFER)
  :: rd_kind[s] == DIRECT && how != E_RANS_OK -> URelease(rd_item[s]); dl_push(rd_item[s], how, PIN_NONE)
  fi;
  rd_st[s] = FREE; rd_own[s] = 0; rd_p[s] = 0; rd_rank[s] = 0; rd_item[s] = 0; rd_kind[s] = 0;
  rd_sub[s] = 0
}

/* @mirrors IvfSearchJob::Progress core/index/ivf_search.cc
   Decides under the lock; then drops pins, tells the sources, issues fetches (inline answers
   find issuing_ > 0 and leave Progress to the issuer) or submits at most the allowed tasks. */
inline Progress(r) {
  if
  :: !routed[r] -> skip   /* Route calls Progress when it is done */
  :: else ->
     xcs = csrc[r]; csrc[r] = 0;
     if
     :: failed[r] ->
        /* outside the lock, in this order: Leave the open tickets, pass dropped data on, then
           CancelSourcesIf (so a re-issue sees the leader gone) */
        /* @mirrors IvfSearchJob::LeaveShared core/index/ivf_search.cc
           @mirrors ScanShare::Leave core/index/scan_share.cc: every open ticket withdraws; a
           ticket a scan already took (closed) waits for its hand-back */
        zi = 0;
        do
        :: zi < NI ->
           if
           :: ist[RI(r, zi)] == FETCHING && !ecl[tent[RI(r, zi)] - 1] ->
              printf("MSC: r%d leaves the scan of P%d\n", r, plan[RI(r, zi)]);
              leave_seen = 1;
              ze = tent[RI(r, zi)] - 1;
              TicketDone(RI(r, zi), ze)
           :: else -> skip
           fi;
           zi++
        :: else -> break
        od;
        do
        :: nrq[r] > 0 ->
           nrq[r]--;
           xi = rq[RI(r, 0)];
           rq[RI(r, 0)] = rq[RI(r, 1)]; rq[RI(r, 1)] = rq[RI(r, 2)]; rq[RI(r, 2)] = 0;
           pinned[r] = pinned[r] - SIZE(r, xi);
           ist[RI(r, xi)] = DONE;
           scanned[r]++;
           /* dropped: its data goes on to the entry's other tickets, or is unpinned */
           ze = tent[RI(r, xi)] - 1;
           PassOn(RI(r, xi), ze)
        :: else -> break
        od;
        do
        :: next_fetch[r] < nitems[r] -> ist[RI(r, next_fetch[r])] = DONE; scanned[r]++; next_fetch[r]++
        :: else -> break
        od;
        zi = 0; ze = 0
     :: else -> skip
     fi;
     xnf = 0;   /* fetches while the request's pinned bytes stay under max_pinned_bytes */
     do
     :: next_fetch[r] < nitems[r] ->
        if
        :: pinned[r] > 0 && pinned[r] + SIZE(r, next_fetch[r]) > MAXPIN -> break
        :: else ->
           pinned[r] = pinned[r] + SIZE(r, next_fetch[r]);
           fif[r]++;
           ist[RI(r, next_fetch[r])] = FETCHING;
           next_fetch[r]++;
           xnf++
        fi
     :: else -> break
     od;
     xtasks = 0;
     if
     :: xnf == 0 ->
        do
        :: nrq[r] > 0 && nact[r] + xtasks < MAXT && xtasks < nrq[r] -> xtasks++
        :: else -> break
        od;
        nact[r] = nact[r] + xtasks;
        tasks2_seen = tasks2_seen || nact[r] > 1
     :: else -> issuing[r]++
     fi;
     xstage = 0;
     if
     :: xnf == 0 && !finishing[r] && nact[r] == 0 && fif[r] == 0 && issuing[r] == 0 &&
        scanned[r] == nitems[r] -> finishing[r] = 1; xstage = 1
     :: else -> skip
     fi;
     if
     :: xcs ->   /* @mirrors IvfSearchJob::CancelSourcesIf core/index/ivf_search.cc */
        CancelQuery(r);   /* @mirrors Segment::CancelQuery storage/collection/segment.h: the scheduler, */
        UCancelQuery(r)   /* then the uncached budget */
     :: else -> skip
     fi;
     if
     :: xnf > 0 ->
        /* @mirrors IvfSearchJob::StartFetch core/index/ivf_search.cc */
        xk = next_fetch[r] - xnf;
        do
        :: xk < next_fetch[r] -> wl_push(E_FETCH * 32 + RI(r, xk)); xk++
        :: else -> break
        od;
        wl_push(E_ISSUED * 32 + r)
     :: else ->
        do
        :: xtasks > 0 -> tq_push(T_SCAN * 4 + r); xtasks--
        :: else -> break
        od;
        if
        :: xstage -> tq_push(T_FINISH * 4 + r)
        :: else -> skip
        fi
     fi
  fi;
  xcs = 0; xnf = 0; xtasks = 0; xstage = 0; xk = 0; xi = 0
}

/* The invariants every step must keep (safety property (a)). */
inline CheckInvariants() {
  /* I/O budget: queue depth and bytes in flight, over only by the one forced read */
  assert(nsub <= QD + (forced != 0 -> 1 : 0));
  assert(iob <= IOB + (forced != 0 -> sub_len[forced - 1] : 0));
  /* the cache never holds more than its budget (Segment only asks kIfRoom) */
  assert(cused <= CACHEB);
  /* uncached bytes: within cache.uncached_bytes, but for the one over-budget grant; a grant
     or a waiting read belongs to an entry whose fetch is out or whose data is held */
  xk = 0; xi = 0;
  do
  :: xi < NRI ->
     if
     :: (ugr & (1 << xi)) != 0 -> xk = xk + psize[plan[xi]]; assert(est[xi] != ES_FREE)
     :: else -> skip
     fi;
     assert((uwait & (1 << xi)) == 0 || (est[xi] == ES_FETCH && (ugr & (1 << xi)) == 0));
     xi++
  :: else -> break
  od;
  assert(xk <= UB + (uforced != 0 -> psize[plan[uforced - 1]] : 0));
  assert(uforced == 0 || (ugr & (1 << (uforced - 1))) != 0);
  xk = 0; xi = 0;
  yr = 0;
  do
  :: yr < NREQ ->
     /* pinned bytes = bytes of the items fetching, ready or being scanned, and under
        max_pinned_bytes unless a single item holds them all */
     xk = 0; xe = 0; xi = 0;
     do
     :: xi < NI ->
        if
        :: ist[RI(yr, xi)] == FETCHING || ist[RI(yr, xi)] == READY || ist[RI(yr, xi)] == TAKEN ->
           xk = xk + SIZE(yr, xi); xe++
        :: else -> assert(ipin[RI(yr, xi)] == PIN_NONE)
        fi;
        xi++
     :: else -> break
     od;
     assert(pinned[yr] == xk);
     assert(nact[yr] <= MAXT);   /* scan tasks queued or running: at most concurrency() */
     assert(pinned[yr] <= MAXPIN || xe == 1);
     yr++
  :: else -> break
  od;
  /* Tickets and entries agree, so each ticket is answered exactly once: a registered ticket
     (FETCHING) is in its entry's list; an accepted one (READY, TAKEN) is its entry's accepted
     ticket; any other is on no entry. An entry's queries stay within max_queries_per_scan. */
  xi = 0;
  do
  :: xi < NRI ->
     if
     :: ist[xi] == FETCHING ->
        assert(tent[xi] != 0 && (etk[tent[xi] - 1] & (1 << xi)) != 0 && est[tent[xi] - 1] != ES_FREE)
     :: ist[xi] == READY || ist[xi] == TAKEN -> assert(tent[xi] != 0 && eacc[tent[xi] - 1] == xi + 1)
     :: else -> assert(tent[xi] == 0)
     fi;
     if
     :: est[xi] == ES_FREE -> assert(etk[xi] == 0 && eacc[xi] == 0 && !ecl[xi])
     :: else ->
        assert((est[xi] == ES_HELD) == (eacc[xi] != 0));
        xk = (eacc[xi] != 0 -> 1 : 0);
        xj = 0;
        do
        :: xj < NRI ->
           if
           :: (etk[xi] & (1 << xj)) != 0 -> assert(ist[xj] == FETCHING && tent[xj] == xi + 1); xk++
           :: else -> skip
           fi;
           xj++
        :: else -> break
        od;
        assert(xk <= MAXQ)
     fi;
     xi++
  :: else -> break
  od;
  /* the map holds open entries only; a cache pin belongs to a ReadyItem (no pin outlives the
     requests it was fetched for: an entry drops data nobody accepts at once) */
  xi = 0;
  do
  :: xi < NP ->
     assert(emap[xi] == 0 || (est[emap[xi] - 1] != ES_FREE && !ecl[emap[xi] - 1] && plan[emap[xi] - 1] == xi));
     xk = 0; xj = 0;
     do
     :: xj < NRI ->
        if
        :: ipin[xj] == PIN_CACHE && plan[xj] == xi -> xk++
        :: else -> skip
        fi;
        xj++
     :: else -> break
     od;
     assert(cpins[xi] == xk);
     xi++
  :: else -> break
  od;
  yr = 0; xk = 0; xe = 0; xi = 0; xj = 0;
#ifdef COVER
  assert(!(COVER))   /* a coverage run: make model-check requires this to fail */
#endif
  skip
}

/* Runs what the current thread still owes before its step ends: read answers and fetches it
   queued, then Progress calls, until nothing is left. */
inline Settle() {
  do
  :: uowed -> uowed = 0; UGrant()
  :: !uowed && ndl > 0 ->
     ndl--;
     zd = dl[ndl];
     dl[ndl] = 0;
     es = zd / 16;
     et = (zd / 4) % 4 + E_RANS_OK;
     zd = zd % 4;
     Deliver(es, et, zd);
     es = 0; et = 0; zd = 0
  :: !uowed && ndl == 0 && nwl > 0 ->
     et = wl[0];
     xi = 0;
     do
     :: xi + 1 < nwl -> wl[xi] = wl[xi + 1]; xi++
     :: else -> break
     od;
     nwl--;
     wl[nwl] = 0;
     es = et % 32;
     et = et / 32;
     if
     :: et == E_FETCH || et == E_REFETCH ->
        if
        :: et == E_FETCH -> fr = es / NI; fi2 = es % NI; Register(fr, fi2); fr = 0; fi2 = 0
        :: else -> zf = es
        fi;
        if
        :: zf != NONE -> FetchAttempt(zf)
        :: else -> skip
        fi;
        zf = 0
     :: et == E_ISSUED ->
        issuing[es]--;
        if
        :: failed[es] -> csrc[es] = 1   /* queued after the sources were told: tell again */
        :: else -> skip
        fi;
        pp = pp | (1 << es)
     :: et == E_RANS_OK || et == E_RANS_STOP || et == E_RANS_IOERR -> ReadAnswer(es, et)
     :: et == E_GRANT ->
        /* ReadUncached's grant callback: the query may be gone (the grant returns); the
           partition may have been loaded meanwhile (@mirrors Segment::TryHit
           storage/collection/segment.cc; the grant returns unused); else the read */
        assert(est[es] == ES_FETCH && (ugr & (1 << es)) != 0);
        if
        :: TOKEN_BAD(ftk[es] / NI) -> URelease(es); dl_push(es, E_RANS_STOP, PIN_NONE)
        :: !TOKEN_BAD(ftk[es] / NI) && cst[plan[es]] == CACHED ->
           cpins[plan[es]]++; URelease(es); dl_push(es, E_RANS_OK, PIN_CACHE)
        :: !TOKEN_BAD(ftk[es] / NI) && cst[plan[es]] != CACHED ->
           Read(DIRECT, ftk[es] / NI, plan[es], ftk[es] % NI, es)
        fi
     fi;
     es = 0; et = 0
  :: !uowed && ndl == 0 && nwl == 0 && pp != 0 ->
     yr = 0;
     do
     :: pp & (1 << yr) -> break
     :: else -> yr++
     od;
     pp = pp & ~(1 << yr);
     xj = yr;
     Progress(xj)
  :: else -> break
  od;
  xe = 0; ys = 0; xi = 0; xj = 0; yr = 0;
  CheckInvariants()
}

/* @mirrors IvfSearchJob::Answer core/index/ivf_search.cc: `done` runs once, after every fetch
   has answered, so no pin or budget outlives the request. */
inline Answer(r) {
  assert(!answered[r]);
  assert(fif[r] == 0 && nrq[r] == 0 && pinned[r] == 0 && nact[r] == 0);
  xi = 0;
  do
  :: xi < NI ->
     assert(ipin[RI(r, xi)] == PIN_NONE);
     assert(ist[RI(r, xi)] != FETCHING && ist[RI(r, xi)] != READY && ist[RI(r, xi)] != TAKEN);
     assert(failed[r] || xi >= nitems[r] || ist[RI(r, xi)] == DONE);   /* every probe scanned */
     xi++
  :: else -> break
  od;
  /* every ticket of r answered: none is registered on any entry (an entry r led or joined may
     still be fetching: it owns that fetch, for its other tickets or to drop the data) */
  xi = 0;
  do
  :: xi < NRI ->
     assert((etk[xi] & (7 << (r * NI))) == 0);
     assert(eacc[xi] == 0 || (eacc[xi] - 1) / NI != r);
     assert(xi / NI != r || tent[xi] == 0);
     xi++
  :: else -> break
  od;
  xi = 0;
  printf("MSC: r%d answered (failed=%d)\n", r, failed[r]);
  answered[r] = 1
}

/* @mirrors IvfSearch core/index/ivf_search.cc: the job registers OnCancel, submits Route */
inline StartSearch(r) {
  arrived[r] = 1;
  printf("MSC: r%d arrives\n", r);
  if
  :: cancelled[r] -> FailLocked(r); pp = pp | (1 << r)   /* OnCancel after Cancel: Abort now */
  :: else -> skip
  fi;
  tq_push(T_ROUTE * 4 + r)
}

#if NREQ > 2
#define ENTRIES_FREE (est[0] == ES_FREE && est[1] == ES_FREE && est[2] == ES_FREE && \
  est[3] == ES_FREE && est[4] == ES_FREE && est[5] == ES_FREE && est[6] == ES_FREE && \
  est[7] == ES_FREE && est[8] == ES_FREE)
#else
#define ENTRIES_FREE (est[0] == ES_FREE && est[1] == ES_FREE && est[2] == ES_FREE && \
  est[3] == ES_FREE && est[4] == ES_FREE && est[5] == ES_FREE)
#endif

/* The gRPC layer: requests arrive one after another (query_seq = arrival order). */
active proctype Client() {
  byte r = 0;
  d_step { Setup() };
  do
  :: r < NREQ -> d_step { StartSearch(r); Settle() }; r++
  :: else -> break
  od;
  /* every request answers; then nothing is left pinned, queued or in flight */
  (answered[0] && answered[1] && (NREQ < 3 || answered[NREQ - 1]));
  /* then every entry's fetch answers (an entry whose tickets all left drops its data): no pin
     outlives every request it was fetched for */
  (ENTRIES_FREE);
  d_step {
    r = 0;
    do
    :: r < NP -> assert(emap[r] == 0); r++
    :: else -> break
    od;
    r = 0;
    do
    :: r < NP -> assert(cpins[r] == 0 && cwait[r] == 0 && cst[r] != LOADING); r++
    :: else -> break
    od;
    r = 0;
    do
    :: r < NRD -> assert(rd_st[r] == FREE); r++
    :: else -> break
    od;
    assert(nsub == 0 && iob == 0 && forced == 0);
    assert(uwait == 0 && ugr == 0 && uforced == 0);   /* every uncached grant returned */
    r = 0
  }
}

/* An arena worker slot: takes the next task (FIFO) and runs its body without ever waiting. A
   scan task is two steps (take the batch; scan, merge and go on) so that completions,
   cancellations and other slots interleave with a scan in progress.
   @mirrors TbbExecutor::Submit core/exec/tbb_executor.cc (the enqueued functor) */
active [SLOTS] proctype Worker() {
  byte t, r, batch, cnt, bytes;
end_idle:
  do
  :: d_step {
       ntq > 0;
       t = tq[0];
       xi = 0;
       do
       :: xi + 1 < ntq -> tq[xi] = tq[xi + 1]; xi++
       :: else -> break
       od;
       ntq--;
       tq[ntq] = 0;
       xi = 0;
       r = t % 4;
       t = t / 4;
       if
       :: t == T_ROUTE ->
          /* @mirrors IvfSearchJob::Route core/index/ivf_search.cc (Plan: the static plan) */
          if
          :: TOKEN_BAD(r) -> FailLocked(r)
          :: else -> nitems[r] = nplan[r]   /* @mirrors IvfSearchJob::Plan core/index/ivf_search.cc */
          fi;
          routed[r] = 1;
          printf("MSC: task Route r%d: %d partitions to probe\n", r, nitems[r]);
          pp = pp | (1 << r);
          Settle();
          t = 0; r = 0
       :: t == T_FINISH ->
          /* @mirrors IvfSearchJob::FinishScan core/index/ivf_search.cc (no refine) */
          Answer(r);
          CheckInvariants();
          t = 0; r = 0
       :: t == T_MAINT ->
          /* RunAndWait's task: @mirrors ParallelFor core/exec/run_and_wait.cc */
          maint_done = 1;
          t = 0; r = 0
       :: t == T_SCAN ->
          /* @mirrors IvfSearchJob::Scan core/index/ivf_search.cc: take a share of what is
             ready, ceil(ready / max_tasks) clamped to [1, K], at most B bytes (>= 1 item) */
          xk = (nrq[r] + MAXT - 1) / MAXT;
          xk = (xk < 1 -> 1 : (xk > KBATCH -> KBATCH : xk));
          do
          :: nrq[r] > 0 && cnt < xk && (cnt == 0 || bytes + SIZE(r, rq[RI(r, 0)]) <= BBYTES) ->
             xi = rq[RI(r, 0)];
             bytes = bytes + SIZE(r, xi);
             batch = batch | (1 << xi);
             cnt++;
             ist[RI(r, xi)] = TAKEN;
             rq[RI(r, 0)] = rq[RI(r, 1)]; rq[RI(r, 1)] = rq[RI(r, 2)]; rq[RI(r, 2)] = 0;
             nrq[r]--
          :: else -> break
          od;
          xi = 0; xk = 0;
          printf("MSC: task Scan r%d takes %d partitions\n", r, cnt);
          batch2_seen = batch2_seen || cnt > 1;
          CheckInvariants()
       fi
     }
     if
     :: t == T_SCAN ->
#ifdef SEEDED_BLOCKING_TASK
        /* The seed's bug (Lance's spawn_cpu + blocking_recv): the task keeps its slot and
           waits for the request's next partition before it hands back its budget. */
        if
        :: scanned[r] + cnt < nitems[r] ->
           printf("MSC: task Scan r%d waits in the arena for its next partition\n", r);
           nrq[r] > 0;   /* blocks the arena slot */
           d_step {
             xi = rq[RI(r, 0)];
             bytes = bytes + SIZE(r, xi); batch = batch | (1 << xi); cnt++;
             ist[RI(r, xi)] = TAKEN;
             rq[RI(r, 0)] = rq[RI(r, 1)]; rq[RI(r, 1)] = rq[RI(r, 2)]; rq[RI(r, 2)] = 0;
             nrq[r]--;
             xi = 0
           }
        :: else -> skip
        fi;
#endif
        d_step {
          /* Scan, after the batch is taken: check cancellation before each partition, scan,
             unpin as soon as scanned, merge under the lock, then Progress. */
          sok = 1;   /* never blocks: a d_step's first statement must be executable */
#ifdef SEEDED_WAIT_IN_TASK
          /* the same wait written inside the task body: spin's "block in d_step" check */
          (scanned[r] + cnt >= nitems[r] || nrq[r] > 0);
#endif
          xi = 0;
          do
          :: xi < NI ->
             if
             :: batch & (1 << xi) ->
                ze = tent[RI(r, xi)] - 1;
                assert(eacc[ze] == RI(r, xi) + 1);
                if
                :: sok && TOKEN_BAD(r) -> sok = 0
                :: else -> skip
                fi;
                pinned[r] = pinned[r] - SIZE(r, xi);
                ist[RI(r, xi)] = DONE;
                if
                :: !sok -> PassOn(RI(r, xi), ze)   /* not scanned here: the others still want it */
                :: else ->
                   Close(ze);   /* from here no ticket joins: score every registered query */
                   zc = 1;
                   zi = 0;
                   do
                   :: zi < NRI ->
                      if
                      :: (etk[ze] & (1 << zi)) != 0 -> zc++
                      :: else -> skip
                      fi;
                      zi++
                   :: else -> break
                   od;
                   assert(zc <= MAXQ && zc <= eq[ze]);   /* no scan scores more than the cap */
                   printf("MSC: task Scan r%d scores P%d for %d queries\n", r, plan[ze], zc);
                   zi = 0;
                   do
                   :: zi < NRI ->
                      if
                      :: (etk[ze] & (1 << zi)) != 0 -> OnHandBack(zi, ze)
                      :: else -> skip
                      fi;
                      zi++
                   :: else -> break
                   od;
                   eacc[ze] = 0;
                   tent[RI(r, xi)] = 0;
                   Unpin(RI(r, xi), ze);   /* unpin as soon as scanned */
                   FreeEntry(ze)
                fi;
                zi = 0; zc = 0; ze = 0
             :: else -> skip
             fi;
             xi++
          :: else -> break
          od;
          printf("MSC: task Scan r%d scanned %d, unpinned\n", r, cnt);
          scanned[r] = scanned[r] + cnt;
          nact[r]--;
          if
          :: !sok -> FailLocked(r)
          :: else -> skip
          fi;
          pp = pp | (1 << r);
          sok = 0; xi = 0;
          Settle();
          t = 0; r = 0; batch = 0; cnt = 0; bytes = 0
        }
     :: else -> skip
     fi
  od
}

/* The device: any read in flight may complete, in any order.
   @mirrors IoScheduler::OnComplete storage/sched/io_scheduler.cc */
inline Complete(s, how) {
  /* @mirrors IoPolicy::Complete storage/sched/io_policy.cc */
  iob = iob - sub_len[s];
  if
  :: forced == s + 1 -> forced = 0
  :: else -> skip
  fi;
  sub_st[s] = 0;
  sub_len[s] = 0;
  nsub--;
  printf("MSC: I/O: submission %d completes (error=%d)\n", s, how == E_RANS_IOERR);
  xi = 0;
  do
  :: xi < NRD ->
     if
     :: rd_st[xi] == FLYING && rd_sub[xi] == s ->
        qinfl[rd_own[xi]]--;
        rd_st[xi] = ANSWERED;
        wl_push(how * 32 + xi)
     :: else -> skip
     fi;
     xi++
  :: else -> break
  od;
  xi = 0;
  Dispatch();
  Settle()
}

active proctype IoDevice() {
  byte s, how;
end_io:
  do
  :: atomic {
     if   /* which submission completes (any order), and how */
     :: sub_st[0] -> s = 0
     :: sub_st[1] -> s = 1
#if NSUB > 2
     :: sub_st[2] -> s = 2
#endif
     fi;
     if
     :: how = E_RANS_OK
#if IOERR
     :: how = E_RANS_IOERR
#endif
     fi;
     d_step { Complete(s, how); s = 0; how = 0 }
     }
  od
}

/* A maintenance thread (outside the arena) runs CPU work through RunAndWait and blocks there:
   allowed, it is not an arena slot. @mirrors RunAndWait core/exec/run_and_wait.cc */
active proctype Admin() {
  d_step { tq_push(T_MAINT * 4) };
  maint_done   /* WaitState::AllDone, awaited on the admin thread */
}

#if DEADLINES
/* Deadlines pass in arrival order (one timeout for all); the client or gRPC's deadline cancels
   the token at any time. @mirrors CancelToken::Cancel core/base/cancel.h */
active proctype Canceller() {
  byte r, c;
end_cancel:
  do
#if QUIESCE
  :: break   /* liveness runs: no more deadlines or cancellations from here on (any point) */
#endif
  :: d_step {
       r < NSTOP && !expired[r] ->
       expired[r] = 1;   /* Check() now fails; queued reads expire at the next Dispatch */
       printf("MSC: r%d's deadline passes\n", r);
       r++
     }
  :: atomic {
     if   /* which request's token is cancelled */
     :: !cancelled[0] -> c = 0
#if NSTOP > 1
     :: !cancelled[1] -> c = 1
#endif
#if NSTOP > 2
     :: !cancelled[2] -> c = 2
#endif
     fi;
     d_step {
       cancelled[c] = 1;
       printf("MSC: r%d is cancelled\n", c);
       if
       :: arrived[c] && !answered[c] ->   /* @mirrors IvfSearchJob::Abort core/index/ivf_search.cc */
          FailLocked(c); pp = pp | (1 << c); Settle()
       :: else -> skip
       fi;
       c = 0
     }
     }
  od
}
#endif

#define ALLDONE (answered[0] && answered[1] && (NREQ < 3 || answered[NREQ - 1]))
ltl live { <> ALLDONE }
