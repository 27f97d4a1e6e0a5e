/*
 * Configurations of the model (select with -DCFG=n). Sizes are in units (think: 4 MiB).
 *
 *   NREQ     requests (2 or 3), each one query probing 2-3 partitions
 *   NP       partitions of the one segment, contiguous in lists.dat in index order
 *   SLOTS    arena worker slots (cpu.threads); MAXT = executor.concurrency() = SLOTS
 *   KBATCH   batch_partitions (K), BBYTES batch_bytes (B), MAXPIN max_pinned_bytes
 *   QD       io.queue_depth, IOB io.max_inflight_bytes, MAXREQB io.max_request_bytes
 *   CACHEB   cache.bytes
 *   SHARE    search.share_scans (default 0 in 1-6: run.sh also runs some with -DSHARE=1)
 *   MAXQ     search.max_queries_per_scan (default NREQ: no cap)
 *   NSTOP    requests 0 .. NSTOP-1 may expire or be cancelled (default NREQ: every one)
 *   UB       cache.uncached_bytes, the UncachedBudget (default 1: smaller than the partitions
 *            of size 2 and 3, so an uncached read of one only goes through the over-budget grant)
 *
 * Configurations 1-6 have a partition larger than IOB (only the oldest query's over-budget
 * read can fetch it), a partition probed by two requests, and a partition already cached.
 * 7 and 8 exist for shared scans: three requests on one partition with a cap of two queries
 * per scan (7), and two requests probing the same two partitions in opposite order on two
 * arena slots (8). 9 exists for the re-issue argument: three requests on one partition, two of
 * which may stop while the entry's read is queued, the third never.
 */
#ifndef CFG
#define CFG 1
#endif

#if CFG == 1
/* two requests, one arena slot: r0 probes P0 P1, r1 probes P1 P2; P2 cached; P1 > IOB */
#define NREQ 2
#define NP 3
#define SLOTS 1
#define KBATCH 1
#define BBYTES 2
#define MAXPIN 2
#define QD 1
#define IOB 1
#define MAXREQB 2
#define CACHEB 3
inline Setup() {
  psize[0] = 1; psize[1] = 2; psize[2] = 1;
  poff[0] = 0; poff[1] = 1; poff[2] = 3;
  plan[0] = 0; plan[1] = 1; nplan[0] = 2;
  plan[3] = 1; plan[4] = 2; nplan[1] = 2;
  cst[2] = CACHED; cused = 1
}
#elif CFG == 2
/* the same requests on two arena slots, K = 2, a cache too small for everything */
#define NREQ 2
#define NP 3
#define SLOTS 2
#define KBATCH 2
#define BBYTES 2
#define MAXPIN 3
#define QD 2
#define IOB 2
#define MAXREQB 3
#define CACHEB 2
inline Setup() {
  psize[0] = 1; psize[1] = 3; psize[2] = 1;
  poff[0] = 0; poff[1] = 1; poff[2] = 4;
  plan[0] = 0; plan[1] = 1; nplan[0] = 2;
  plan[3] = 1; plan[4] = 2; plan[5] = 0; nplan[1] = 3;
  cst[2] = CACHED; cused = 1
}
#elif CFG == 3
/* three requests, one arena slot: r0 P0 P1, r1 P1 P2, r2 P2 P0; P0 cached; P1 > IOB */
#define NREQ 3
#define NP 3
#define SLOTS 1
#define KBATCH 2
#define BBYTES 2
#define MAXPIN 2
#define QD 1
#define IOB 1
#define MAXREQB 2
#define CACHEB 3
inline Setup() {
  psize[0] = 1; psize[1] = 2; psize[2] = 1;
  poff[0] = 0; poff[1] = 1; poff[2] = 3;
  plan[0] = 0; plan[1] = 1; nplan[0] = 2;
  plan[3] = 1; plan[4] = 2; nplan[1] = 2;
  plan[6] = 2; plan[7] = 0; nplan[2] = 2;
  cst[0] = CACHED; cused = 1
}
#elif CFG == 4
/* three requests on two arena slots */
#define NREQ 3
#define NP 3
#define SLOTS 2
#define KBATCH 1
#define BBYTES 2
#define MAXPIN 2
#define QD 1
#define IOB 1
#define MAXREQB 2
#define CACHEB 3
inline Setup() {
  psize[0] = 1; psize[1] = 2; psize[2] = 1;
  poff[0] = 0; poff[1] = 1; poff[2] = 3;
  plan[0] = 0; plan[1] = 1; nplan[0] = 2;
  plan[3] = 1; plan[4] = 2; nplan[1] = 2;
  plan[6] = 2; plan[7] = 0; nplan[2] = 2;
  cst[0] = CACHED; cused = 1
}
#elif CFG == 5
/* three requests, one probing three partitions; two slots, a cache that fits one partition */
#define NREQ 3
#define NP 3
#define SLOTS 2
#define KBATCH 2
#define BBYTES 2
#define MAXPIN 3
#define QD 2
#define IOB 2
#define MAXREQB 3
#define CACHEB 2
inline Setup() {
  psize[0] = 1; psize[1] = 3; psize[2] = 1;
  poff[0] = 0; poff[1] = 1; poff[2] = 4;
  plan[0] = 0; plan[1] = 1; plan[2] = 2; nplan[0] = 3;
  plan[3] = 2; plan[4] = 0; nplan[1] = 2;
  plan[6] = 1; plan[7] = 2; nplan[2] = 2;
  cst[2] = CACHED; cused = 1
}
#elif CFG == 6
/* coalescing: r0 probes P2 P0, r1 probes P0 P1; r1's P0 and P1 queue behind r0's read and go
   in flight as one submission; one arena slot */
#define NREQ 2
#define NP 3
#define SLOTS 1
#define KBATCH 2
#define BBYTES 2
#define MAXPIN 2
#define QD 1
#define IOB 2
#define MAXREQB 2
#define CACHEB 2
inline Setup() {
  psize[0] = 1; psize[1] = 1; psize[2] = 1;
  poff[0] = 0; poff[1] = 1; poff[2] = 2;
  plan[0] = 2; plan[1] = 0; nplan[0] = 2;
  plan[3] = 0; plan[4] = 1; nplan[1] = 2
}
#elif CFG == 7
/* shared scans, one arena slot: r0 probes P1 P0, r1 P0, r2 P0; nothing cached, the cache
   holds one partition; at most 2 queries per scan, so of three requests on P0 one opens a
   second entry (or the older r0, arriving at P0 after r1 leads it, opens its own); r1's read
   of P0 can queue behind r0's read of P1 and be re-issued for r2 when r1 is cancelled */
#define NREQ 3
#define NP 2
#define SLOTS 1
#define KBATCH 1
#define BBYTES 1
#define MAXPIN 1
#define QD 1
#define IOB 1
#define MAXREQB 1
#define CACHEB 1
#ifndef SHARE
#define SHARE 1
#endif
#ifndef MAXQ
#define MAXQ 2
#endif
inline Setup() {
  psize[0] = 1; psize[1] = 1;
  poff[0] = 0; poff[1] = 1;
  plan[0] = 1; plan[1] = 0; nplan[0] = 2;
  plan[3] = 0; nplan[1] = 1;
  plan[6] = 0; nplan[2] = 1
}
#elif CFG == 8
/* shared scans on two arena slots: r0 probes P0 P1, r1 P1 P0; P0 cached; P1 > IOB */
#define NREQ 2
#define NP 2
#define SLOTS 2
#define KBATCH 2
#define BBYTES 3
#define MAXPIN 3
#define QD 1
#define IOB 1
#define MAXREQB 2
#define CACHEB 2
#ifndef SHARE
#define SHARE 1
#endif
inline Setup() {
  psize[0] = 1; psize[1] = 2;
  poff[0] = 0; poff[1] = 1;
  plan[0] = 0; plan[1] = 1; nplan[0] = 2;
  plan[3] = 1; plan[4] = 0; nplan[1] = 2;
  cst[0] = CACHED; cused = 1
}
#elif CFG == 9
/* repeated re-issues (5d7e6a9's argument): r0 probes P1 P0, r1 P0, r2 P0; P1 > IOB, so r0's
   read of P1 goes in flight as the forced read and holds the device while r0's read of P0
   queues; r1 and r2 join r0's entry (no cap); only r0 and r1 may expire or be cancelled. r0
   stopping while its read of P0 is queued re-issues the fetch for r1; r1 stopping while that
   read is queued re-issues it for r2, whose token stays fine and who must get the data. */
#define NREQ 3
#define NP 2
#define SLOTS 1
#define KBATCH 1
#define BBYTES 2
#define MAXPIN 3
#define QD 1
#define IOB 1
#define MAXREQB 2
#define CACHEB 3
#ifndef SHARE
#define SHARE 1
#endif
#define NSTOP 2
inline Setup() {
  psize[0] = 1; psize[1] = 2;
  poff[0] = 0; poff[1] = 1;
  plan[0] = 1; plan[1] = 0; nplan[0] = 2;
  plan[3] = 0; nplan[1] = 1;
  plan[6] = 0; nplan[2] = 1
}
#endif

#ifndef UB
#define UB 1                 /* cache.uncached_bytes: smaller than some partitions */
#endif

#define MAXT SLOTS
