// Package postgres is the PostgreSQL spend ledger, shared by every
// replica of a fleet. Ledger is what serve runs: internal/ledger/spool's
// queue, spool and ingester on this replica's disk in front of the
// database (Open), whose reads wait until the database holds what was
// acknowledged. DB is the database side: Insert, which the ingester
// calls with a batch of records; the reads of ledger.Reader (Records,
// Totals) and ledger.Aggregates (Buckets, Lifetime); the upkeep of the
// partitions (EnsurePartitions, DropBefore, Upkeep, run by serve every
// hour with ledger.retention); and each replica's report of its spool
// (Report, Behind), which readers use to say what they may miss.
//
// It owns the ledger's tables — ledger_records and its monthly
// partitions, ledger_ids, ledger_buckets, ledger_life, ledger_dropped,
// ledger_spools —
// and the "ledger" component of sluice_schema, whose migrations it
// passes to pgmigrate: Open only checks the schema (a replica never
// migrates by surprise), Migrate applies it. It must not touch any other
// component's tables, and it does no queueing, batching or retrying of
// its own: the spool in front of it makes records durable before
// PostgreSQL has them, and retries what Insert could not store. It
// stores and sums what it is given; it prices nothing and enforces no
// budget.
//
// # Times
//
// Times are bigint Unix nanoseconds (UTC; 0 for unset), started_at
// included, and the records are partitioned on that same column.
// ledger.Record keeps times to the nanosecond and the contract suite
// checks it, where timestamptz keeps microseconds; and a partition key
// that is the column the reports filter on lets PostgreSQL prune
// partitions from the reports' own started_at bounds. Keeping a
// timestamptz beside the nanoseconds would cost a column and a second,
// equal predicate in every query for nothing the ledger reads.
//
// # Records
//
// ledger_records is range-partitioned by UTC month of started_at, one
// partition per month named ledger_records_YYYY_MM. Its primary key is
// (request_id, started_at): a record's start never changes, so a replay
// lands in the same partition and conflicts there. Its indexes, one per
// report, are led by the column the report filters on — (key_id,
// started_at), (team, …), (org, …), (model, …) — and one is on started_at
// alone; being partitioned, each is a b-tree per month, so an insert
// touches this month's and a report reads only the months its range
// touches.
//
// A partitioned table can only be unique on keys that hold its partition
// key, so (request_id, started_at) does not stop a second record of one
// RequestID at another time, which ledger.Ledger promises (the first
// record wins, whatever the second holds). ledger_ids, unpartitioned,
// holds each request_id once: Insert claims a record's id there first and
// stores only the records whose id it claimed. With UUIDv7 ids, each
// claim lands at the right edge of its b-tree.
//
// Partitions are made ahead: Open makes this month's and the next three
// (EnsurePartitions, which a long-running process should also call
// daily), and Insert makes the month of a record that finds none (a clock
// far ahead, a replay of an old record) and tries once more. A partition
// is made as a table of ledger_records' shape and then attached, in one
// transaction under an advisory lock (two replicas may need the same
// month at once): CREATE TABLE … PARTITION OF would wait for an ACCESS
// EXCLUSIVE lock on ledger_records, behind every insert and report in
// flight and ahead of every later one, where ATTACH PARTITION takes SHARE
// UPDATE EXCLUSIVE, which blocks neither. The first and last months a
// nanosecond reaches (1677-09, 2262-04) are open at their outer end
// (MINVALUE, MAXVALUE).
//
// There is no DEFAULT partition. It would take the records of a month
// with no partition without a word, and then making that month's
// partition would have to scan the default one under lock and would fail
// while it held rows of that month, which someone would have to move by
// hand; retention could never drop it, since it holds any month. A
// record with no partition is an error Insert handles by making one.
//
// # Aggregates
//
// ledger_buckets holds, per 15-minute bucket of started_at (Unix seconds,
// ledger.BucketOf), scope (key, team, org), id and model, the sums of
// cost, input, cached input and output tokens and requests;
// ledger_life the same over all buckets. Both are unpartitioned (a
// month's buckets go with its partition, by DELETE) and written in the
// statement that stores the records they count. Costs
// are numeric pico-dollars, exact however large (a record's cost is an
// int64 of pico-dollars, $9.2M; a sum is not bounded by it); reads turn
// them into money.Sum, which holds $9.2 trillion. Token sums are bigint,
// and a record that would take one past an int64 is refused, alone.
//
// # Insert
//
// Insert runs one transaction with synchronous_commit on, whatever the
// session's default (the spool forgets a record once Insert returns), and
// one statement (insert.go, insertSQL): the batch as an array per column,
// unnested; ids claimed in ledger_ids (ON CONFLICT DO NOTHING RETURNING);
// the records of the ids claimed inserted (ON CONFLICT DO NOTHING
// RETURNING); and the aggregates of exactly the rows returned upserted,
// each row once, in key order, so a record stored already is skipped and
// never counted twice and concurrent Inserts never deadlock. When
// PostgreSQL refuses the statement for a value (text that is not UTF-8,
// an index entry too large, a sum that overflows), Insert runs the batch
// one record per statement to find the one to blame, and returns its
// index, having stored nothing, so that the caller drops it and inserts
// the rest again.
//
// # Retention
//
// DropBefore drops the partitions entirely before a cutoff, oldest
// first, each in its own transaction under SET LOCAL lock_timeout = '2s':
// it locks the partition (a report reading it holds it off), deletes its
// ids from ledger_ids, drops it — which takes ACCESS EXCLUSIVE on
// ledger_records for the moment of the drop, so inserts and reads queue
// behind it for at most the timeout, and the spool absorbs that —
// deletes the aggregates' buckets of its month and notes its range in
// ledger_dropped, whose records Insert skips from then on (a replay of a
// record whose id was forgotten must not be counted again). A partition
// it cannot lock in time is skipped, named in the error (ErrSkipped), and
// tried again by the next call. The lifetime sums stay.
//
// # Reports at scale
//
// TestExplain loads 10,000,000 records spread evenly from the start of
// the month a year ago until now (16 partitions with those made ahead;
// about 807,000 records a month, 27,000 a day), 1,000 keys in 100 teams
// in 10 orgs, 5 models, and their aggregates, with INSERT … SELECT FROM
// generate_series into a throwaway database, and runs EXPLAIN (ANALYZE,
// BUFFERS) on each report's query as the reads
// build it. To reproduce it (five minutes to load, 6.9 GB):
//
//	SLUICE_PG_EXPLAIN=1 go test -run TestExplain -v -timeout 1h ./internal/ledger/postgres
//
// The plans, on PostgreSQL 15 with 2 CPUs and 128 MB of shared buffers
// (the second run of each; testdata/explain.txt has them whole):
//
//	Records, key_0042 over a day                                        0.04 ms
//	  Sort (started_at DESC, request_id)
//	    Bitmap Heap Scan on ledger_records_2026_12   (the one partition)
//	      Bitmap Index Scan on ledger_records_2026_12_key_id_started_at_idx
//	        key_id = … AND started_at >= … AND started_at < …     27 rows
//
//	Totals by team over a month                                       336 ms
//	  Sort ← Finalize GroupAggregate ← Gather Merge (2 workers)
//	    Partial HashAggregate (team)
//	      Parallel Seq Scan on ledger_records_2026_11   (the one partition)
//	        807,138 rows, no row removed by the filter
//
//	Totals by model over the last 7 days                              113 ms
//	  Sort ← Finalize GroupAggregate ← Gather Merge (2 workers)
//	    Partial HashAggregate (model) ← Parallel Append
//	      Parallel Index Scan using ledger_records_2026_11_started_at_idx   8,513 rows
//	      Parallel Seq Scan on ledger_records_2026_12                     179,820 rows
//	      Seq Scan on ledger_records_2027_01, _02, _03    (ahead, empty)
//
//	Totals by model of key_0042 over a month                          1.2 ms
//	  Sort ← HashAggregate (model)
//	    Bitmap Heap Scan on ledger_records_2026_11      (the one partition)
//	      Bitmap Index Scan on ledger_records_2026_11_key_id_started_at_idx   807 rows
//
//	Buckets since a day ago                                            22 ms
//	  Index Scan using ledger_buckets_pkey (bucket >= …)          37,749 rows
//
//	Lifetime                                                          1.2 ms
//	  Sort (scope, id, model) ← Seq Scan on ledger_life       1,110 rows, 13 pages
//
// Every report reads only the partitions its range touches (of 16); a
// range without an end keeps the months made ahead, which are empty. A
// report filtered by key (team, org, model) reads that column's index in
// those partitions. A report over every record of a whole month reads
// that partition from end to end, in parallel: it needs each row, and an
// index would only add reads. Buckets is a range of ledger_buckets'
// primary key, led by the bucket; since Insert adds rows in time order,
// the range sits together at the end of the table (760 pages for a day).
// Lifetime is one small table, read whole.
package postgres
