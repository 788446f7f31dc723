// Package sqlite is the embedded ledger backend: the spend records in one
// SQLite file (modernc.org/sqlite, no cgo) of their own, apart from the key
// store's, written by group commit.
//
// # Durability
//
// The file runs in WAL mode with synchronous=FULL: a commit returns once
// the WAL is synced, and Append returns nil only after the commit that
// holds its record did, so a record whose Append returned survives a crash
// of the process or of the machine (TestCrashLosesNothing kills a writer
// mid-run and finds every acknowledged record). Appends are made durable
// by Run, the committer, which must be running: Open starts no goroutine.
//
// # The spool
//
// With Options.Spool (what `sluice serve` runs), a record is durable
// before SQLite has it: the committer writes each batch as checksummed
// frames to the spool, the file beside the ledger named like it plus
// "-spool", with one write and one fdatasync, and then acknowledges the
// batch's Appends. On Linux the fdatasync hands off the goroutine's P
// before it blocks (sync_linux.go), so that with GOMAXPROCS=1 requests are
// still answered, and the next batch forms, while it waits for the
// device. The ingester, a goroutine Run starts, inserts the
// spooled records into SQLite in transactions of up to 1,024 records, at
// most 250 ms after the first arrived (at once when a read is waiting),
// each transaction synced as without a spool (synchronous=FULL), so that
// when the spool is rewound every record it held is durable in SQLite.
// A read (Records, Totals, Buckets, Lifetime) first waits until SQLite
// holds every record acknowledged before it began, so a Ledger's reads see
// its acknowledged Appends as without a spool. A Reader (Options.Reader,
// below) inserts what the spool holds into SQLite itself before each
// read, duplicates skipped: `sluice spend` run right after a reply shows
// its record (TestReaderSeesOwnersRecords).
// Open replays the spool's frames into SQLite (a RequestID already there
// is skipped, so nothing is counted twice), then rewinds it; the spool is
// also rewound in use once it has grown past 1 MiB: the committer asks the
// ingester to catch up first, waiting at most 100 ms (under steady load
// the ingester is never caught up by itself), so the spool stays near
// 1 MiB unless SQLite falls behind (TestSpoolStaysSmallUnderSteadyLoad).
// spool.go holds the layout and why only a torn tail can be lost,
// and only if it was never acknowledged (TestCrashLosesNothing kills a
// spooling writer and finds every acknowledged record after the replay).
// Replay resynchronizes past a damaged frame — a flipped bit, a bad
// sector — to the next frame of the generation whose CRC-32C verifies,
// so damage loses the frames it hit and no others; a header that does
// not verify takes its generation from the first frame
// (TestReplayEveryBitFlip, TestReplayEveryTruncation,
// TestReplayResynchronizes). A spool in which replay found damage is
// copied to <spool>-damaged-<unix time> before it is rewound, and what
// was skipped is logged at error level (Options.Logger) and counted
// (DamagedFrames; serve exports it as
// sluice_ledger_spool_damaged_frames_total): TestOpenKeepsDamagedSpool.
//
// One Ledger of a file writes it: with Options.Spool, Open takes the
// spool by an exclusive flock, and fails with an *InUseError (ErrInUse,
// the holder's pid where /proc/locks tells it) when another Ledger, in
// this process or another, holds it. A second `sluice serve` of one file
// used to commit to SQLite directly beside the first, and the two
// admitted every budget twice (TestSecondWriterRefused). A Reader
// (`sluice spend`) takes no spool and reads beside the writer; the next
// writer to open after a crash replays what was left. Without flock
// (not Unix), no Ledger has a spool and a second writer is not detected.
// If the spool cannot be written, the failure is reported
// (Options.OnError) and the Ledger commits directly from then on; a
// record SQLite refuses at ingestion, which Append would have returned as
// an error, is reported and dropped; an ingestion SQLite fails as a whole
// is retried with backoff, the records staying durable in the spool.
//
// Why: a SQLite commit writes one WAL frame per page it changed (the
// table, each index, the aggregates: a dozen pages for one record) and
// syncs, which made the ledger a third of the whole service's CPU per
// request. BenchmarkAppendSpool, CPU per record (the whole process's,
// ingestion included) on the shared 2-core VM, noisy run to run:
//
//	appenders  direct   spool   spool, Linger 1ms
//	       16  102–127  53–94   60 (MaxWait 1ms: 41–64)
//	      256   46–54   46–57   38
//
// Options.Linger lets a busy committer wait for company: after a batch of
// more than one record, the next waits up to Linger for more, so a sync
// is shared by more records; a lone record never waits. serve sets 1 ms.
//
// # Aggregates
//
// Beside the records, the table spend_agg holds, per scope (key, team,
// org), id, model and 15-minute bucket of StartedAt, the sums of cost,
// input, cached input and output tokens and requests: what
// ledger.Aggregates reads (Buckets, Lifetime) to rebuild budgets at
// start-up. The committer writes them in the transaction that inserts
// the records, so a record and its aggregates are committed together or
// not at all, crash included (TestAggregateFailureWritesNothing,
// TestCrashLosesNothing). A ledger file from before the aggregates
// (schema version 1) is migrated when it is opened: migration 2 creates
// the table and fills it from the records already there, in the
// migration's transaction (TestMigrationBackfill). Migration 3 adds
// client_request_id and error_type; request_id, which held the client's
// x-request-id until then, is from then on the id Sluice generates, and
// the rows already there keep theirs as both (TestMigrationClientRequestID).
// Migration 4 makes costs exact pico-dollars: a record's cost_micros
// becomes cost_pico (× 10⁶), the aggregates keep their whole micro-dollars
// and gain cost_pico, the pico-dollars beyond them, and the records gain
// the 1-hour cache-write and audio token counts (TestMigrationPico).
// Totals and Lifetime sum the micro-dollars and the pico-dollar
// remainders apart and put them together in Go, so no sum overflows
// below $9.2 trillion (TestMillionRecordsExact).
//
// # Group commit
//
// Append queues the record and waits. Run takes up to MaxBatch queued
// records and, in one BEGIN IMMEDIATE transaction, inserts them (32 to a
// statement, the rest one by one: see below), sums the ones it stored (a
// RequestID already there is neither stored nor counted) per aggregate
// row in memory, writes each row the batch touched once, commits, and
// answers every Append of the batch with the outcome. A record the database refuses (a constraint)
// fails alone and the rest of its batch is committed again without it;
// so does a record whose sums would overflow an aggregate (its cost sum
// holds 9.2 trillion dollars, so only a corrupt record can). Any
// other error fails the whole batch, and its callers may retry (a
// RequestID is written once, so a retry never double-counts). When its
// context ends, Run stops taking Appends, commits what is queued, and
// returns.
//
// # The CPU a record costs the committer
//
// The committer (the ingester, with a spool) is where the ledger's CPU
// goes under load, so its transaction is written to cost little per
// record (committer.go):
//
//   - It runs on the driver's connection (sql.Conn.Raw) with statements
//     prepared there: database/sql checks and converts every argument of
//     every call (27 per record) and locks around each.
//   - It inserts records 32 to a statement (INSERT OR ROLLBACK … ON
//     CONFLICT (request_id) DO NOTHING: a RequestID already stored, in the
//     ledger or earlier in the statement, is still skipped row by row,
//     and OR ROLLBACK spares SQLite the statement journal a multi-row
//     statement that may abort would keep), the rest of the batch one by
//     one. When a statement skipped some records, the rowids it used tell
//     which it stored (TestMultiRowInsertDuplicates). When SQLite refuses
//     a multi-row statement for a constraint, the transaction is rolled
//     back and the batch written again one record per statement, which
//     names the record to blame (TestMultiRowInsertRefusal).
//   - Its connection has a page cache of 16 MiB rather than SQLite's
//     2 MiB, and checkpoints the WAL every 10,000 pages rather than 1,000,
//     and after a second with nothing to commit; it goes back to the pool
//     with SQLite's defaults (TestCommitterSettings, TestIdleCheckpoint).
//     With records over many keys a transaction changes a page per key
//     (spend_key's and the aggregates'): the small cache spilled dirty
//     pages into the WAL before the commit and read back pages it had just
//     dropped, and a checkpoint after nearly every commit copied the same
//     pages into the database file again and again.
//
// BenchmarkIngest (CPU per record of ingestOnce: transactions of 128 or
// 1,024 pre-built records, a checkpoint at the end included; an empty
// ledger or a million rows; every record on one key, or over 1,000), the
// code before these changes and after, five interleaved runs each on the
// shared 2-core VM, medians in µs:
//
//	SLUICE_BENCH_LEDGERS=/tmp/ledgers go test -tags=vtprotobuf -run '^$' -bench BenchmarkIngest -benchtime 20480x ./internal/ledger/sqlite
//
//	keys  rows  batch  before  after
//	   1     0    128    22.1   17.8
//	   1     0   1024    14.4   12.1
//	   1    1M    128    21.7   14.8
//	   1    1M   1024    19.0   10.9
//	1000     0    128    37.0   35.2
//	1000     0   1024    26.0   22.2
//	1000    1M    128   142.4   85.9
//	1000    1M   1024   109.6   60.5
//
// Of the one-key gain, the statements (multi-row inserts on the driver's
// connection) are nearly all: with SQLite's 2 MiB cache (and checkpoints
// every 10,000 pages) they measured 22.4 → 15.5 and 19.1 → 10.5 at a
// million rows, in another interleaved set of runs. The cache is
// the many-keys gain; on an empty ledger it costs some of what the
// statements save, because every page the ledger grows by is a new
// buffer until the cache holds 16 MiB (the million-row runs start with a
// full cache, as a server's committer soon has, and then recycle
// buffers). BenchmarkAppendSpool, spool, median of 3: 60.7 → 53.8
// cpu-µs/record with 16 appenders, 43.1 → 35.6 with 256. Multi-row
// statements of 16, 32 and 64 rows measured within the noise of one
// another; 32 rows bind 864 parameters, under the 999 that is the
// smallest limit any SQLite build has had.
//
// Measured and left: synchronous=NORMAL on the committer's connection
// saved 1.5–2 µs a record at 128 a transaction and 0.5 at 1,024 (the
// process's CPU; the kernel writes the pages out anyway, on its own
// threads), and would make the spool's rewind unsound as it stands: the
// spool is rewound once SQLite holds its records, and a NORMAL commit is
// durable only after a later sync of the WAL, so a power loss could lose
// records the spool no longer has. Page sizes of 2 KiB and 8 KiB for new
// files (built from empty, like the 4 KiB ones) measured within the noise
// of 4 KiB. No index dominates (each index's b-tree search is a few per
// cent), and each serves a Filter (read.go). Transactions larger than 128
// cost less per record (the 1,024 column), and a transaction holds what
// the ingester collects in its delay, now 250 ms (it was 50 ms, about
// 128 records at 2,500 a second; 250 ms holds about 600).
//
// # What an insert touches
//
// A record's cost must not grow with the ledger's history, so every
// b-tree an insert changes takes it at its right edge, among today's
// entries (schema version 5, schema.go): the table and request_id (a
// UUIDv7, ordered by time) by themselves; spend_started by started_at;
// the filter indexes spend_key, spend_team, spend_org and spend_model
// are led by the record's day (dayExpr) before their column; spend_agg's
// primary key is led by the bucket; and the lifetime sums per scope, id
// and model are a table of their own, spend_life, one row each, which
// Lifetime reads instead of every bucket's row. Led by the column, as
// they were, a record's entries went inside its key's range among every
// earlier day's, so with many keys each batch split and rewrote a page
// per key in the middle of six b-trees. A filtered read scans its
// column's index once per day that holds a record (read.go: the days
// are found by a loose scan of the index, one lookup each), and
// Records, newest first, still stops at its limit.
//
// BenchmarkIngest, a million rows of history over 1,000 keys before
// today (ingestRecord) and records over the same keys today, medians
// of 3 interleaved runs, cpu-µs a record:
//
//	SLUICE_BENCH_LEDGERS=/tmp/ledgers go test -tags=vtprotobuf -run '^$' -bench BenchmarkIngest -benchtime 20480x ./internal/ledger/sqlite
//
//	keys  rows  batch  before  after
//	   1     0    128    16.9   16.9
//	   1    1M    128    14.0   14.5
//	1000     0    128    33.3   43.1
//	1000     0   1024    21.3   28.2
//	1000    1M    128    84.8   48.5
//	1000    1M   1024    56.1   27.7
//
// So a million rows of history now cost what none do (within this
// machine's noise), where they cost 2.5×. The price is the lifetime
// rows: with records over 1,000 keys, a batch writes as many lifetime
// rows as bucket rows, and an empty ledger's cost rose by a third.
//
// Migration 5 builds these from every record already there, in one
// transaction: 75 s for ten million records and 3.0 million aggregate
// rows (a 3.7 GB file). Open tells Options.OnMigrate before it upgrades
// an existing file, so that serve can say why it is not ready yet
// (TestMigrationDayIndexes). The committer reads the schema version in
// every transaction, under its write lock, and writes nothing to a
// schema newer than its own: a newer sluice that upgraded the file while
// this one ran may read tables this one does not write (as schema 5's
// Lifetime reads spend_life). A direct Append then fails; a spooled
// record stays in the spool, the failure is reported and retried
// (TestNewerSchemaStopsWrites). The read costs about 6 µs a transaction.
//
// # Defaults, and the numbers behind them
//
// Measured on the 2-core development VM (ext4 on virtio, fsync ≈ 0.5 ms)
// while other jobs shared it, so runs vary by ±30% and more; medians of
// 3 runs of
//
//	go test -run '^$' -bench 'BenchmarkAppend' -benchtime 2s -count 3 ./ledger/sqlite
//
// with aggregates, and, for comparison, of the commit before them in the
// same session, interleaved. The records are spread over 1,000 keys, 50
// teams, 5 orgs and 4 models (benchRecord): consecutive records share
// almost no aggregate row, so a batch of 128 writes some 250 rows, near
// the worst case of three per record. A commit of one record costs about
// 0.5 ms, nearly all of it the WAL sync.
//
// MaxWait = 0: no timer. The committer commits what is queued at once,
// and what arrives while a commit runs is the next batch, so the commit's
// own duration is the batching window and batches grow with the load.
// BenchmarkAppendRate (open loop: appends arrive at a fixed rate, each in
// its own goroutine, as settlements do) shows that a timer only adds
// latency, aggregates or not; it saves WAL syncs, not throughput. At
// 20,000/s the committer falls behind whatever the wait (it peaks near
// 13,000/s at this concurrency with these records), and the queue, not
// the timer, sets the latency:
//
//	rate/s  MaxWait  done/s  p50 ms  p99 ms  records/commit  commits/s
//	  1000  0           901    0.79     5.9     1.1          841
//	  1000  500µs       929    1.78     5.3     1.7          556
//	  1000  1ms         902    2.03    12.6     2.0          413
//	  1000  2ms         872    3.08    10.2     2.9          288
//	  5000  0          4213    2.66    18.0     6.5          639
//	  5000  500µs      4216    3.15    16.0     9.3          432
//	  5000  1ms        4344    2.91    19.8    10.5          399
//	  5000  2ms        4247    4.21    19.9    14.8          254
//	 20000  0         12259     137     458   125.9           98
//	 20000  500µs     12733     153     489   126.7          100
//	 20000  1ms       12569     108     425   123.7          102
//	 20000  2ms       13464     101     285   125.9          107
//
// MaxBatch = 128: the cap matters only when the committer is saturated.
// BenchmarkAppend (closed loop: each of N appenders appends again as soon
// as its Append returned; MaxWait 0) gives records/s, and in parentheses
// the mean records per commit:
//
//	with aggregates
//	appenders  batch=1   batch=16    batch=128    batch=1024
//	        1  1931 (1)  1830 (1)    1655 (1)     1636 (1)
//	       16  1331 (1)  4982 (8)    4588 (8)     4877 (8)
//	       64  1889 (1)  8300 (16)   9995 (32)   10958 (32)
//	      256  1981 (1)  8291 (16)  13505 (128)  15221 (129)
//	     1024  1599 (1)  7428 (16)  15731 (127)  21173 (536)
//
//	without (the previous commit, same session)
//	appenders  batch=1   batch=16    batch=128    batch=1024
//	        1  2039 (1)  1946 (1)    2185 (1)     1930 (1)
//	       16  2329 (1)  8838 (8)    8143 (8)     8716 (8)
//	       64  2133 (1) 12675 (16)  14848 (32)   14146 (32)
//	      256  2235 (1) 11998 (16)  21224 (128)  20353 (130)
//	     1024  2176 (1) 12169 (16)  19199 (128)  24047 (530)
//
// A batch of 1 is one sync per record: about 2,000/s at any concurrency.
// The aggregates cost 20–35% of the throughput at saturation with these
// records (another interleaved run: 21,100 → 15,800 at 256 appenders,
// 22,100 → 16,300 at 1024, batch 128), less when batches share rows:
// BenchmarkAppendOneRow, every record on one key, team, org and model,
// gave 34,000 → 32,200/s at 256 appenders and batch 128 (−5%, within the
// noise). They cost latency too, since a
// commit does more: median Append latency at 16 appenders rose from 1.7
// to 2.7 ms, at 256 from 11 to 18 ms. (Writing each row with an UPDATE,
// and an INSERT only when the row is new, measured 10% faster than an
// UPSERT, which looks the row up twice.) Earlier sessions, on a quieter
// machine with every record on one key, measured 30,000–35,000/s at 128.
//
// Are the defaults still right? MaxWait 0, yes: the timer still only adds
// latency. MaxBatch 128, yes for the load it is sized for: below
// saturation batches stay smaller than any cap (8 at 16 appenders, 32 at
// 64), so the cap changes nothing. Only with hundreds of Appends queued
// does it bind, and there 1024 now gains consistently at 1024 appenders
// (+35% here, +25% without aggregates), because a larger batch shares
// more aggregate rows; at 256 appenders the two are within the noise. A
// full batch of 1024 holds the write lock (another writer of the file
// waits) about 50 ms, one of 128 about 8 ms. If the embedded ledger must absorb bursts
// of over 1,000 concurrent settlements, raise MaxBatch to 512–1024; at
// the request rates the embedded default is for, 128 is as good.
// (Left at 128.)
//
// It owns the file's schema and nothing else: no pricing, no budgets, and
// no logging but the damage Open finds in the spool (Options.Logger); it
// stores and sums the records it is given.
package sqlite
