package store

// ApplicationID marks a SQLite file as a crowdtrain database (PRAGMA
// application_id, bytes 68-71 of the header): "CROW". Open refuses files
// whose id is another application's.
const ApplicationID = 0x43524F57

// migrations bring the schema from version i (PRAGMA user_version) to
// i+1. Open runs all a database lacks in one transaction with the
// user_version bump (Store.migrate), so a crash or a failing disk leaves
// the version the database had. Append only: never edit a migration
// that has shipped, since databases in the field have already run it;
// each shipped schema is kept as a test fixture, testdata/schema-vN.sql,
// that TestMigrateFromEveryKeptSchema upgrades.
//
// Times are INTEGER unix nanoseconds in UTC (exact round trip, sortable);
// NULL where the Go value is the zero time. Tables are STRICT so a wrong
// type is an error rather than a silent conversion.
var migrations = []string{
	// 0 -> 1: the first schema.
	`
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
`,
	// 1 -> 2: PruneWorkers finds the oldest workers without a scan.
	`CREATE INDEX workers_by_last_seen ON workers (last_seen, id);`,
	// 2 -> 3: the volunteer ledger (store/volunteers.go): credit and
	// standing per volunteer, the addresses each was recently seen from,
	// bans of addresses, and join tokens (only a hash of each secret).
	`
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
`,
	// 3 -> 4: checkpoints in chunks (store/checkpoints.go). A large
	// model's parameters and optimizer state are written and read a few
	// MB at a time, never as one value the size of the model (which
	// SQLite copies whole when it binds it, and which could not pass
	// SQLITE_MAX_LENGTH). The row keeps the small columns and the
	// checksum; params and opt_state stay empty in it, and chunk_bytes
	// says how many bytes its chunks hold (0: the data is in the row, as
	// every schema before wrote it).
	`
ALTER TABLE checkpoints ADD COLUMN chunk_bytes INTEGER NOT NULL DEFAULT 0;

CREATE TABLE checkpoint_chunks (
	job_id  TEXT NOT NULL,
	version INTEGER NOT NULL,
	part    INTEGER NOT NULL, -- 0: params, 1: opt_state
	seq     INTEGER NOT NULL, -- the chunk's place in its part, from 0
	data    BLOB NOT NULL,
	PRIMARY KEY (job_id, version, part, seq),
	FOREIGN KEY (job_id, version) REFERENCES checkpoints (job_id, version) ON DELETE CASCADE
) STRICT;
`,
}

// SchemaVersion is the schema version (PRAGMA user_version) this build
// writes: the number of migrations it knows.
func SchemaVersion() int { return len(migrations) }
