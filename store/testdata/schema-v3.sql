-- Schema version 3 of the crowdtrain store, as store/schema.go at commit
-- 4b0e27e created it (migrations 0 -> 3), with a few rows. The migration
-- tests build a database from this file and open it with the current code.
PRAGMA application_id = 1129467735; -- 0x43524F57, "CROW"
PRAGMA user_version = 3;

CREATE TABLE jobs (
	id          TEXT PRIMARY KEY NOT NULL,
	name        TEXT NOT NULL,
	spec        BLOB NOT NULL,
	state       TEXT NOT NULL,
	reason      TEXT NOT NULL,
	created_at  INTEGER NOT NULL,
	done_at     INTEGER,
	incarnation INTEGER NOT NULL
) STRICT;

-- The small columns come before the BLOBs so that listing checkpoints
-- (length() of the BLOBs) reads only each row's first page, never the
-- overflow chains holding the data. crc32c catches damage inside the
-- BLOBs, which SQLite's own checks cannot see.
CREATE TABLE checkpoints (
	job_id     TEXT NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
	version    INTEGER NOT NULL,
	epoch      INTEGER NOT NULL,
	created_at INTEGER NOT NULL,
	crc32c     INTEGER NOT NULL, -- of params, opt_state, progress in turn
	params     BLOB NOT NULL,
	opt_state  BLOB NOT NULL,
	progress   BLOB NOT NULL,
	PRIMARY KEY (job_id, version)
) STRICT;

CREATE TABLE metrics (
	id               INTEGER PRIMARY KEY,
	job_id           TEXT NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
	at               INTEGER NOT NULL,
	version          INTEGER NOT NULL,
	accuracy         REAL,
	loss             REAL,
	examples_per_sec REAL NOT NULL,
	updates_per_sec  REAL NOT NULL,
	note             TEXT NOT NULL
) STRICT;
CREATE INDEX metrics_by_job ON metrics (job_id, at, id);

-- No foreign key on job_id: a worker may be idle (no job) or outlive
-- the job it last worked on.
CREATE TABLE workers (
	id         TEXT PRIMARY KEY NOT NULL,
	job_id     TEXT NOT NULL,
	kind       TEXT NOT NULL,
	backend    TEXT NOT NULL,
	client     TEXT NOT NULL,
	remote     TEXT NOT NULL,
	threads    INTEGER NOT NULL,
	first_seen INTEGER NOT NULL,
	last_seen  INTEGER NOT NULL,
	examples   INTEGER NOT NULL,
	accepted   INTEGER NOT NULL,
	rejected   INTEGER NOT NULL
) STRICT;
CREATE INDEX workers_by_last_seen ON workers (last_seen, id);

CREATE TABLE volunteers (
	id               TEXT PRIMARY KEY NOT NULL,
	name             TEXT NOT NULL,
	token_id         TEXT NOT NULL, -- '' for a volunteer known by key or address
	examples         INTEGER NOT NULL,
	flops            REAL NOT NULL,
	refuted_examples INTEGER NOT NULL,
	refuted_flops    REAL NOT NULL,
	strikes          INTEGER NOT NULL,
	banned           INTEGER NOT NULL,
	ban_reason       TEXT NOT NULL,
	first_seen       INTEGER NOT NULL,
	last_seen        INTEGER NOT NULL
) STRICT;

CREATE TABLE volunteer_addresses (
	volunteer_id TEXT NOT NULL REFERENCES volunteers (id) ON DELETE CASCADE,
	address      TEXT NOT NULL,
	last_seen    INTEGER NOT NULL,
	PRIMARY KEY (volunteer_id, address)
) STRICT;

-- An address ban names the volunteer whose ban it came from, so that
-- pardoning the volunteer lifts it.
CREATE TABLE address_bans (
	address      TEXT PRIMARY KEY NOT NULL,
	volunteer_id TEXT NOT NULL,
	reason       TEXT NOT NULL,
	banned_at    INTEGER NOT NULL
) STRICT;
CREATE INDEX address_bans_by_volunteer ON address_bans (volunteer_id);

CREATE TABLE join_tokens (
	id          TEXT PRIMARY KEY NOT NULL,
	name        TEXT NOT NULL,
	secret_hash BLOB NOT NULL, -- SHA-256 of the secret: the secret itself is never stored
	created_at  INTEGER NOT NULL,
	revoked_at  INTEGER
) STRICT;

-- A row or two in every table of schema 2 (the volunteer tables stay
-- empty): a running job with two checkpoints, its
-- metrics and a worker, and a finished job. The store treats specs and
-- checkpoint BLOBs as opaque, so they are small stand-ins; crc32c is the
-- CRC-32C of params, opt_state and progress in turn, as the store checks.
INSERT INTO jobs VALUES ('job-run', 'fixture', CAST('{"name":"fixture","model":"mnist-mlp"}' AS BLOB), 'running', '', 1764400000000000000, NULL, 2);
INSERT INTO jobs VALUES ('job-done', 'finished', CAST('{"name":"finished","model":"mnist-mlp"}' AS BLOB), 'done', 'target accuracy reached', 1764300000000000000, 1764350000000000000, 1);
INSERT INTO checkpoints VALUES ('job-run', 10, 0, 1764400010000000000, 2152940307, X'01020304', X'0506', CAST('{"shard":3}' AS BLOB));
INSERT INTO checkpoints VALUES ('job-run', 20, 1, 1764400020000000000, 2613279116, X'09080706', X'', CAST('{"shard":7}' AS BLOB));
INSERT INTO metrics (job_id, at, version, accuracy, loss, examples_per_sec, updates_per_sec, note) VALUES
	('job-run', 1764400011000000000, 10, 0.5, 1.25, 1000, 10, ''),
	('job-run', 1764400021000000000, 20, NULL, NULL, 1200, 12, 'resumed');
INSERT INTO workers VALUES ('w-1', 'job-run', 'native', 'cpu', 'crowdtrain/test', '127.0.0.1:5000', 4,
	1764400001000000000, 1764400021000000000, 6400, 20, 1);
