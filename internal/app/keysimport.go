package app

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/csv"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/sluicegw/sluice/internal/admin"
	"github.com/sluicegw/sluice/internal/apikey"
	"github.com/sluicegw/sluice/internal/cli"
	"github.com/sluicegw/sluice/internal/store"
	"github.com/sluicegw/sluice/policies"
)

const keysImportSummary = `Import API keys into the store from FILE: JSON lines (.jsonl, .ndjson) or
CSV with a header row (.csv), one key per line, or as --format says.

A record holds the key itself ("key": "sk-sluice-…", hashed on import and
never stored or printed) or its SHA-256 ("sha256", as sluice.yaml's keys),
its "team", and optionally "name", "prefix" (with sha256), "models",
"limits" (as in sluice.yaml; in CSV a JSON object, or rpm/rph/rpd columns)
and "expires_at" (RFC 3339 or 2027-01-31). A JSON line, for example:

  {"key": "sk-sluice-…", "team": "demo", "name": "ci", "models": ["gpt-4o-mini"]}
  {"sha256": "9f86d0…", "team": "demo", "limits": {"requests": {"per_minute": 60}}}

and CSV:

  sha256,team,name,models,rpm,expires_at
  9f86d0…,demo,ci,"gpt-4o-mini,gpt-4o",60,2027-01-31

Importing a file again changes nothing: a key already stored with the same
hash and the same attributes is counted as unchanged. One stored with other
attributes is a conflict: reported with its line and left as it is, unless
--replace (a revoked key stays revoked either way). The keys are written in
transactions of --batch records; a running server picks them up within a
second.

A bad record stops the import at its line: the records before it are
imported, none from it on, and running the import again once it is fixed
carries on where it stopped. With --skip-invalid, every bad record is
reported and skipped instead and every valid one imported.`

// Limits of an import record.
const (
	// maxImportLine bounds a line of the file: a key's record is a few
	// hundred bytes, so a longer line is a wrong file, not a key.
	maxImportLine = 64 << 10
	// maxKeyName is the longest key name, as the admin API takes.
	maxKeyName = 128
	// defaultImportBatch keys are written per transaction: large enough
	// that the commits cost little next to the inserts, small enough that
	// a running server's change feed is not handed one huge read.
	defaultImportBatch = 5000
)

func runKeysImport(ctx context.Context, args []string, stdout, stderr io.Writer, env Env) (err error) {
	// The file holds keys, and a message about a value in the wrong
	// column quotes it: everything the import says passes through
	// apikey.Scrub first.
	stdout, stderr = scrubWriter{stdout}, scrubWriter{stderr}
	defer func() {
		if err != nil && !errors.Is(err, errUsage) {
			err = scrubbedError{err}
		}
	}()
	fs := newFlags("keys import", "FILE", keysImportSummary, stderr)
	config := fs.String("config", "sluice.yaml", "config `file`")
	format := fs.String("format", "", "the file's format, jsonl or csv (default: from its extension)")
	replace := fs.Bool("replace", false, "overwrite a stored key whose hash is in the file with other attributes")
	skipInvalid := fs.Bool("skip-invalid", false, "report and skip bad records instead of stopping at the first")
	batch := fs.Int("batch", defaultImportBatch, "records written per transaction")
	progress := fs.Duration("progress", time.Second, "how often to report progress on stderr (0: never)")
	// Flags may come after FILE too.
	var files []string
	for rest := args; ; {
		if err := fs.Parse(rest); err != nil {
			return cli.FlagErr(err)
		}
		if fs.NArg() == 0 {
			break
		}
		files = append(files, fs.Arg(0))
		rest = fs.Args()[1:]
	}
	var problems []string
	if len(files) != 1 {
		problems = append(problems, fmt.Sprintf("keys import takes exactly one FILE, got %d", len(files)))
	}
	if *batch < 1 {
		problems = append(problems, fmt.Sprintf("--batch must be at least 1, got %d", *batch))
	}
	if *progress < 0 {
		problems = append(problems, fmt.Sprintf("--progress must not be negative, got %s", *progress))
	}
	var fmtName string
	if len(files) == 1 {
		var err error
		if fmtName, err = importFormat(files[0], *format); err != nil {
			problems = append(problems, err.Error())
		}
	}
	if len(problems) > 0 {
		fmt.Fprintln(stderr, strings.Join(problems, "\n"))
		return errUsage
	}
	f, err := os.Open(files[0])
	if err != nil {
		return fmt.Errorf("keys import: %w", err)
	}
	defer f.Close()

	snap, st, err := openStore(ctx, *config, env)
	if err != nil {
		return err
	}
	defer st.Close()
	im, err := newImporter(ctx, st, snap, importOptions{
		file: files[0], format: fmtName, replace: *replace, skipInvalid: *skipInvalid,
		batch: *batch, progress: *progress, stderr: stderr,
	})
	if err != nil {
		return err
	}
	runErr := im.run(ctx, f)
	fmt.Fprintln(stdout, im.summary())
	if runErr != nil {
		return runErr
	}
	if im.conflicts > 0 && !*replace {
		return fmt.Errorf("%s: %d %s left as stored (lines above); pass --replace to overwrite %s with the file's",
			files[0], im.conflicts, plural(im.conflicts, "conflict", "conflicts"), plural(im.conflicts, "it", "them"))
	}
	return nil
}

// importFormat is the format named by --format, else by the file's
// extension.
func importFormat(file, flagValue string) (string, error) {
	switch strings.ToLower(flagValue) {
	case "jsonl", "ndjson", "json":
		return "jsonl", nil
	case "csv":
		return "csv", nil
	case "":
	default:
		return "", fmt.Errorf("--format: want jsonl or csv, got %q", flagValue)
	}
	switch strings.ToLower(filepath.Ext(file)) {
	case ".jsonl", ".ndjson":
		return "jsonl", nil
	case ".csv":
		return "csv", nil
	}
	return "", fmt.Errorf("%s: cannot tell the format from the extension (.jsonl, .ndjson or .csv); pass --format jsonl or --format csv", file)
}

type importOptions struct {
	file, format         string
	replace, skipInvalid bool
	batch                int
	progress             time.Duration
	stderr               io.Writer
}

// importer turns records into keys and writes them in batches. It knows
// every stored key by hash, read once before the first record, so a
// record is classified without a query: new (created), the same as
// stored (unchanged), or stored otherwise (a conflict, or a replacement).
type importer struct {
	opts  importOptions
	st    store.Store
	snap  *policies.Snapshot
	now   time.Time
	teams map[string]bool
	// known is every key by hash: stored before the import (line 0) or
	// written by it, from the line that wrote it.
	known map[[32]byte]knownKey
	// checked remembers the allow-lists and limits already checked
	// against the config (most records repeat a few), with the problem
	// found ("" for none).
	checkedModels map[string]string
	checkedLimits map[string]string

	create, replace []store.Key
	lines           int // lines read
	records         int // records read (lines that are not blank)
	created         int
	unchanged       int
	replaced        int
	conflicts       int
	revoked         int // records of a revoked key, left revoked
	invalid         int // records skipped (--skip-invalid)
	start, lastNote time.Time
}

type knownKey struct {
	key  store.Key
	line int // 0: stored before the import
}

func newImporter(ctx context.Context, st store.Store, snap *policies.Snapshot, opts importOptions) (*importer, error) {
	im := &importer{opts: opts, st: st, snap: snap, now: time.Now().UTC(), teams: map[string]bool{},
		checkedModels: map[string]string{}, checkedLimits: map[string]string{}}
	for _, t := range snap.Teams() {
		im.teams[t.Name] = true
	}
	ch, err := st.Changes(ctx, 0)
	if err != nil {
		return nil, fmt.Errorf("keys import: read the store: %w", err)
	}
	for _, t := range ch.Teams {
		im.teams[t.Name] = true
	}
	im.known = make(map[[32]byte]knownKey, len(ch.Keys))
	for _, k := range ch.Keys {
		im.known[k.Hash] = knownKey{key: k}
	}
	return im, nil
}

// lineError is a record's problem: the line, and what is wrong with it.
type lineError struct {
	line int
	msg  string
}

func (im *importer) at(line int) string { return fmt.Sprintf("%s:%d", im.opts.file, line) }

// run reads every record of r and imports it.
func (im *importer) run(ctx context.Context, r io.Reader) error {
	im.start, im.lastNote = time.Now(), time.Now()
	lr := newLineReader(r)
	var header []string // CSV columns
	for {
		line, err := lr.next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil && !errors.Is(err, errLineTooLong) {
			return fmt.Errorf("%s: read: %w", im.at(lr.n), err)
		}
		im.lines = lr.n
		var rec record
		var bad *lineError
		switch {
		case err != nil:
			im.records++
			bad = &lineError{lr.n, fmt.Sprintf("the line is longer than %d KiB: a key's record is a few hundred bytes; is this the right file?", maxImportLine>>10)}
		case im.opts.format == "csv" && header == nil:
			if header, err = csvHeader(line); err != nil {
				// Nothing can be read without the header.
				return fmt.Errorf("%s: %v", im.at(lr.n), err)
			}
			continue
		default:
			im.records++
			if im.opts.format == "csv" {
				rec, err = csvRecord(header, line)
			} else {
				rec, err = jsonRecord(line)
			}
			if err != nil {
				bad = &lineError{lr.n, err.Error()}
			}
		}
		if bad == nil {
			bad = im.add(rec, lr.n)
		}
		if bad != nil {
			if !im.opts.skipInvalid {
				if err := im.flush(ctx); err != nil {
					return err
				}
				return fmt.Errorf("%s: %s\nNothing from line %d on was imported, and every record before it was. Fix the line and import the file again (what is already imported is left unchanged), or pass --skip-invalid to skip every bad record",
					im.at(bad.line), bad.msg, bad.line)
			}
			im.invalid++
			fmt.Fprintf(im.opts.stderr, "%s: %s (skipped)\n", im.at(bad.line), bad.msg)
		}
		if len(im.create)+len(im.replace) >= im.opts.batch {
			if err := im.flush(ctx); err != nil {
				return err
			}
		}
		im.note()
	}
	if err := im.flush(ctx); err != nil {
		return err
	}
	switch {
	case im.opts.format == "csv" && header == nil:
		return fmt.Errorf("%s: empty: want a header row (for example team,key) and one key per line", im.opts.file)
	case im.records == 0:
		return fmt.Errorf("%s: empty: no records to import; want one key per line", im.opts.file)
	}
	return nil
}

// add classifies the record on line n and queues what it writes, or
// returns its problem.
func (im *importer) add(rec record, n int) *lineError {
	k, expires, problems := im.build(rec)
	if len(problems) > 0 {
		return &lineError{n, strings.Join(problems, "; ")}
	}
	prev, ok := im.known[k.Hash]
	switch {
	case !ok:
		if expires {
			return &lineError{n, "expires_at: " + k.ExpiresAt.Format(time.RFC3339) + " is in the past; a new key must expire in the future"}
		}
		id, err := apikey.NewID(nil)
		if err != nil {
			return &lineError{n, err.Error()}
		}
		k.ID, k.CreatedAt = id, im.now
		im.create = append(im.create, k)
		im.known[k.Hash] = knownKey{key: k, line: n}
		im.created++
	case prev.line == 0 && prev.key.Revoked():
		im.revoked++
		fmt.Fprintf(im.opts.stderr, "%s: key %s (%s…) is revoked: an import never revives a revoked key; left as stored\n",
			im.at(n), prev.key.ID, prev.key.Prefix)
	case sameKey(prev.key, k):
		im.unchanged++
		if prev.line == 0 {
			// A later record of the same key is held to this one.
			im.known[k.Hash] = knownKey{key: prev.key, line: n}
		}
	case prev.line > 0:
		// The file contradicts itself: its first record stands.
		im.conflicts++
		fmt.Fprintf(im.opts.stderr, "%s: conflict: the same key as line %d (%s) with other attributes (%s); line %d's stand\n",
			im.at(n), prev.line, prev.key.ID, strings.Join(diffKeys(prev.key, k), ", "), prev.line)
	case !im.opts.replace:
		im.conflicts++
		fmt.Fprintf(im.opts.stderr, "%s: conflict: key %s (%s…) is stored with other attributes (%s); left as stored (--replace overwrites it)\n",
			im.at(n), prev.key.ID, prev.key.Prefix, strings.Join(diffKeys(prev.key, k), ", "))
	default:
		if expires {
			return &lineError{n, "expires_at: " + k.ExpiresAt.Format(time.RFC3339) + " is in the past; a replaced key must expire in the future"}
		}
		k.ID, k.CreatedAt, k.RevokedAt = prev.key.ID, prev.key.CreatedAt, prev.key.RevokedAt
		if k.Prefix == "" {
			k.Prefix = prev.key.Prefix
		}
		im.replace = append(im.replace, k)
		im.known[k.Hash] = knownKey{key: k, line: n}
		im.replaced++
	}
	return nil
}

// flush writes the queued keys: the new ones in one transaction, the
// replacements in another.
func (im *importer) flush(ctx context.Context) error {
	if len(im.create) > 0 {
		if err := im.st.CreateKeys(ctx, im.create); err != nil {
			im.created -= len(im.create) // none of them was written
			if errors.Is(err, store.ErrExists) {
				return fmt.Errorf("%s: a key of lines up to %d was created in the store by someone else during the import: %w; import the file again (what is imported is left unchanged)", im.opts.file, im.lines, err)
			}
			return fmt.Errorf("%s: write keys of lines up to %d: %w; import the file again (what is imported is left unchanged)", im.opts.file, im.lines, err)
		}
		im.create = im.create[:0]
	}
	if len(im.replace) > 0 {
		if err := im.st.ReplaceKeys(ctx, im.replace); err != nil {
			im.replaced -= len(im.replace) // none of them was written
			return fmt.Errorf("%s: replace keys of lines up to %d: %w; import the file again (what is imported is left unchanged)", im.opts.file, im.lines, err)
		}
		im.replace = im.replace[:0]
	}
	return nil
}

// note reports progress on stderr once per --progress.
func (im *importer) note() {
	if im.opts.progress <= 0 {
		return
	}
	now := time.Now()
	if now.Sub(im.lastNote) < im.opts.progress {
		return
	}
	im.lastNote = now
	rate := float64(im.records) / now.Sub(im.start).Seconds()
	fmt.Fprintf(im.opts.stderr, "keys import: %d records read, %d created, %d unchanged, %d conflicts, %.0f records/s\n",
		im.records, im.created, im.unchanged, im.conflicts, rate)
}

func (im *importer) summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %d %s: created %d, unchanged %d, conflicts %d", im.opts.file, im.records, plural(im.records, "record", "records"), im.created, im.unchanged, im.conflicts)
	if im.replaced > 0 {
		fmt.Fprintf(&b, ", replaced %d", im.replaced)
	}
	if im.revoked > 0 {
		fmt.Fprintf(&b, ", revoked (left revoked) %d", im.revoked)
	}
	if im.invalid > 0 {
		fmt.Fprintf(&b, ", invalid (skipped) %d", im.invalid)
	}
	fmt.Fprintf(&b, " in %s", time.Since(im.start).Round(time.Millisecond))
	if im.created+im.replaced == 0 {
		b.WriteString("; the store is unchanged")
	}
	return b.String()
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// record is one key as the file writes it.
type record struct {
	Key       string        `json:"key"`
	SHA256    string        `json:"sha256"`
	Prefix    string        `json:"prefix"`
	Team      string        `json:"team"`
	Name      string        `json:"name"`
	Models    []string      `json:"models"`
	Limits    *importLimits `json:"limits"`
	ExpiresAt string        `json:"expires_at"`
}

// importLimits are a record's limits, in the admin API's shape.
type importLimits = admin.LimitsJSON

// decodeStrict decodes one JSON value, the whole of data, into v,
// refusing fields v does not have. Its errors never quote a value.
func decodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return fmt.Errorf("invalid JSON at byte %d: %s", syn.Offset, syn.Error())
	case errors.As(err, &typ):
		if typ.Field == "" {
			return fmt.Errorf("want a JSON object, got a %s", typ.Value)
		}
		return fmt.Errorf("%s: want a %s, got a JSON %s", typ.Field, jsonKind(typ.Type.String()), typ.Value)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return errors.New("invalid JSON: the value ends early")
	case err != nil:
		// encoding/json words an unknown field `json: unknown field "x"`.
		msg := strings.TrimPrefix(err.Error(), "json: ")
		if strings.HasPrefix(msg, "unknown field") {
			msg += " (fields: key, sha256, prefix, team, name, models, limits, expires_at)"
		}
		return errors.New(msg)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("more than one JSON value on the line: want one object per line")
	}
	return nil
}

func jsonKind(goType string) string {
	switch {
	case goType == "string":
		return "string"
	case strings.HasPrefix(goType, "[]"):
		return "list"
	case strings.HasPrefix(goType, "int"):
		return "whole number"
	}
	return "JSON object"
}

func jsonRecord(line []byte) (record, error) {
	var r record
	if t := bytes.TrimLeft(line, " \t"); len(t) > 0 && t[0] != '{' {
		return r, errors.New("want a JSON object per line ({\"team\": …, \"key\": …})")
	}
	err := decodeStrict(line, &r)
	return r, err
}

// csvColumns are the columns a CSV file may have, in the order the usage
// lists them.
var csvColumns = []string{"key", "sha256", "prefix", "team", "name", "models", "limits", "rpm", "rph", "rpd", "expires_at"}

func csvHeader(line []byte) ([]string, error) {
	cols, err := csv.NewReader(bytes.NewReader(line)).Read()
	if err != nil {
		return nil, fmt.Errorf("the header row: %v", csvMessage(err))
	}
	seen := map[string]bool{}
	for i, c := range cols {
		c = strings.ToLower(strings.TrimSpace(c))
		switch {
		case !slices.Contains(csvColumns, c):
			return nil, fmt.Errorf("the header row: unknown column %q (columns: %s); the first line must name the columns", c, strings.Join(csvColumns, ", "))
		case seen[c]:
			return nil, fmt.Errorf("the header row: column %q twice", c)
		}
		seen[c] = true
		cols[i] = c
	}
	if !seen["team"] || !seen["key"] && !seen["sha256"] {
		return nil, errors.New("the header row: want a team column and a key or sha256 column")
	}
	return cols, nil
}

func csvMessage(err error) string {
	var pe *csv.ParseError
	if errors.As(err, &pe) {
		return fmt.Sprintf("invalid CSV at column %d: %v", pe.Column, pe.Err)
	}
	return err.Error()
}

func csvRecord(header []string, line []byte) (record, error) {
	var r record
	cr := csv.NewReader(bytes.NewReader(line))
	cr.FieldsPerRecord = len(header)
	fields, err := cr.Read()
	if err != nil {
		if errors.Is(err, csv.ErrFieldCount) {
			return r, fmt.Errorf("want %d fields, as the header row has, got %d", len(header), len(fields))
		}
		return r, errors.New(csvMessage(err))
	}
	var rate policies.RateLimits
	var problems []string
	hasRate := false
	for i, col := range header {
		v := strings.TrimSpace(fields[i])
		switch col {
		case "key":
			r.Key = v
		case "sha256":
			r.SHA256 = v
		case "prefix":
			r.Prefix = v
		case "team":
			r.Team = v
		case "name":
			r.Name = v
		case "models":
			r.Models = cli.SplitList(v)
		case "expires_at":
			r.ExpiresAt = v
		case "limits":
			if v != "" {
				r.Limits = new(importLimits)
				if err := decodeStrict([]byte(v), r.Limits); err != nil {
					problems = append(problems, "limits: "+err.Error())
				}
			}
		case "rpm", "rph", "rpd":
			if v == "" {
				continue
			}
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				problems = append(problems, fmt.Sprintf("%s: want a whole number, got %q", col, v))
				continue
			}
			hasRate = true
			switch col {
			case "rpm":
				rate.PerMinute = n
			case "rph":
				rate.PerHour = n
			default:
				rate.PerDay = n
			}
		}
	}
	if hasRate {
		if r.Limits != nil {
			problems = append(problems, "limits: give limits or rpm, rph and rpd, not both")
		} else {
			r.Limits = &importLimits{Requests: rate}
		}
	}
	if len(problems) > 0 {
		return r, errors.New(strings.Join(problems, "; "))
	}
	return r, nil
}

// build checks rec and makes the key it describes, without an ID or a
// creation time. expired reports an expiry in the past, which only a key
// already stored as the record describes may have. Problems never quote
// a key or a hash.
func (im *importer) build(rec record) (k store.Key, expired bool, problems []string) {
	switch {
	case rec.Key != "" && rec.SHA256 != "":
		problems = append(problems, "give the key or its sha256, not both")
	case rec.Key != "":
		if err := apikey.Validate(rec.Key); err != nil {
			problems = append(problems, "key: "+err.Error())
			break
		}
		k.Hash, k.Prefix = apikey.Hash(rec.Key), apikey.PublicPrefix(rec.Key)
		if rec.Prefix != "" {
			problems = append(problems, "prefix: leave it out with key: the key's own is taken")
		}
	case rec.SHA256 != "":
		if msg := checkSHA256(rec.SHA256); msg != "" {
			problems = append(problems, "sha256: "+msg)
			break
		}
		hex.Decode(k.Hash[:], []byte(rec.SHA256))
		switch {
		case rec.Prefix == "":
		case !strings.HasPrefix(rec.Prefix, apikey.Prefix):
			problems = append(problems, fmt.Sprintf("prefix: must start with %q", apikey.Prefix))
		case sha256.Sum256([]byte(rec.Prefix)) == k.Hash:
			problems = append(problems, "prefix: is the whole key; keep only its first characters")
		case len(rec.Prefix) > 32:
			problems = append(problems, "prefix: at most 32 characters: only the first few of a key are shown")
		default:
			k.Prefix = rec.Prefix
		}
	default:
		problems = append(problems, `key or sha256: required (the key, "sk-sluice-…", or its SHA-256 in hex)`)
	}
	switch {
	case rec.Team == "":
		problems = append(problems, "team: required")
	case !im.teams[rec.Team]:
		problems = append(problems, fmt.Sprintf("team: unknown team %q (teams: %s); create it first (sluice.yaml or the admin API)", rec.Team, im.teamList()))
	}
	k.Team = rec.Team
	switch {
	case len(rec.Name) > maxKeyName:
		problems = append(problems, fmt.Sprintf("name: at most %d bytes, got %d", maxKeyName, len(rec.Name)))
	case strings.ContainsFunc(rec.Name, func(r rune) bool { return !unicode.IsPrint(r) }):
		problems = append(problems, "name: must not contain control characters")
	}
	k.Name = rec.Name
	if len(rec.Models) > 0 {
		joined := strings.Join(rec.Models, "\x00")
		msg, ok := im.checkedModels[joined]
		if !ok {
			msg = problemsText(im.snap.CheckModels("models", rec.Models))
			im.checkedModels[joined] = msg
		}
		if msg != "" {
			problems = append(problems, msg)
		}
		k.Models = rec.Models
	}
	if rec.Limits != nil {
		l, ps := rec.Limits.Limits("limits")
		problems = append(problems, ps...)
		if len(ps) == 0 {
			canon, _ := json.Marshal(l)
			msg, ok := im.checkedLimits[string(canon)]
			if !ok {
				msg = problemsText(im.snap.CheckLimits("limits", l))
				im.checkedLimits[string(canon)] = msg
			}
			if msg != "" {
				problems = append(problems, msg)
			}
		}
		k.Limits = l
	}
	if rec.ExpiresAt != "" {
		t, err := parseImportExpiry(rec.ExpiresAt)
		if err != nil {
			problems = append(problems, "expires_at: "+err.Error())
		}
		k.ExpiresAt = t
		expired = err == nil && !t.After(im.now)
	}
	return k, expired, problems
}

// checkSHA256 checks a hash as sluice.yaml's keys are checked, and never
// echoes it.
func checkSHA256(s string) string {
	switch {
	case strings.HasPrefix(s, apikey.Prefix):
		return `looks like a key, not its SHA-256: put the key in "key", or its hash here (printf %s "$KEY" | sha256sum)`
	case len(s) != 64:
		return fmt.Sprintf("must be 64 lower-case hex characters, got %d characters", len(s))
	case strings.ToLower(s) != s:
		return "must be lower-case"
	}
	if _, err := hex.DecodeString(s); err != nil {
		return "must be 64 lower-case hex characters (0-9, a-f)"
	}
	return ""
}

// parseImportExpiry accepts an RFC 3339 time or a date, no later than the
// store holds. A duration from now is not taken: importing the same file
// again must describe the same keys.
func parseImportExpiry(s string) (time.Time, error) {
	for _, layout := range []string{time.RFC3339, "2006-01-02"} {
		t, err := time.Parse(layout, s)
		if err != nil {
			continue
		}
		if t.After(store.LatestTime()) {
			return time.Time{}, fmt.Errorf("must be no later than %s (the latest time the key store holds), got %s",
				store.LatestTime().Format(time.RFC3339), s)
		}
		return t.UTC(), nil
	}
	return time.Time{}, fmt.Errorf("want an RFC 3339 time (2027-01-31T00:00:00Z) or a date (2027-01-31), got %q", s)
}

func problemsText(ps policies.Problems) string {
	var msgs []string
	for _, p := range ps {
		msgs = append(msgs, p.Path+": "+p.Msg)
	}
	return strings.Join(msgs, "; ")
}

func (im *importer) teamList() string {
	names := make([]string, 0, len(im.teams))
	for n := range im.teams {
		names = append(names, n)
	}
	sort.Strings(names)
	if len(names) > 10 {
		names = append(names[:10], "…")
	}
	return strings.Join(names, ", ")
}

// sameKey reports whether stored has the attributes a record gives. A
// record without a prefix leaves the stored one as it is.
func sameKey(stored, rec store.Key) bool { return len(diffKeys(stored, rec)) == 0 }

// diffKeys names the attributes in which rec differs from stored.
func diffKeys(stored, rec store.Key) []string {
	var d []string
	if rec.Prefix != "" && rec.Prefix != stored.Prefix {
		d = append(d, "prefix")
	}
	if rec.Team != stored.Team {
		d = append(d, fmt.Sprintf("team %q, stored %q", rec.Team, stored.Team))
	}
	if rec.Name != stored.Name {
		d = append(d, fmt.Sprintf("name %q, stored %q", rec.Name, stored.Name))
	}
	if !slices.Equal(rec.Models, stored.Models) {
		d = append(d, "models")
	}
	a, _ := json.Marshal(rec.Limits)
	b, _ := json.Marshal(stored.Limits)
	if !bytes.Equal(a, b) {
		d = append(d, "limits")
	}
	if !rec.ExpiresAt.Equal(stored.ExpiresAt) {
		d = append(d, "expires_at")
	}
	return d
}

var errLineTooLong = errors.New("line too long")

// lineReader reads a file line by line, counting lines from 1: without
// the line end (LF or CRLF), a UTF-8 byte-order mark at the start, and
// blank lines. A line longer than maxImportLine is skipped and reported
// as errLineTooLong.
type lineReader struct {
	r *bufio.Reader
	n int // the number of the line last returned
}

func newLineReader(r io.Reader) *lineReader {
	return &lineReader{r: bufio.NewReaderSize(r, maxImportLine+2)}
}

// next returns the next line that is not blank, valid until the next
// call; io.EOF after the last.
func (l *lineReader) next() ([]byte, error) {
	for {
		line, err := l.r.ReadSlice('\n')
		if len(line) == 0 && errors.Is(err, io.EOF) {
			return nil, io.EOF
		}
		l.n++
		if errors.Is(err, bufio.ErrBufferFull) {
			for errors.Is(err, bufio.ErrBufferFull) {
				_, err = l.r.ReadSlice('\n')
			}
			if err != nil && !errors.Is(err, io.EOF) {
				return nil, err
			}
			return nil, errLineTooLong
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, err
		}
		if l.n == 1 {
			line = bytes.TrimPrefix(line, []byte("\xef\xbb\xbf"))
		}
		line = bytes.TrimSuffix(line, []byte("\n"))
		line = bytes.TrimSuffix(line, []byte("\r"))
		if len(bytes.TrimSpace(line)) > 0 {
			return line, nil
		}
	}
}

// scrubWriter writes through apikey.Scrub.
type scrubWriter struct{ w io.Writer }

func (s scrubWriter) Write(p []byte) (int, error) {
	if _, err := io.WriteString(s.w, apikey.Scrub(string(p))); err != nil {
		return 0, err
	}
	return len(p), nil
}

// scrubbedError is err with its text through apikey.Scrub.
type scrubbedError struct{ err error }

func (e scrubbedError) Error() string { return apikey.Scrub(e.err.Error()) }
func (e scrubbedError) Unwrap() error { return e.err }
