// Package jobs keeps background runs: their state, the tail of their
// output, their result, and a record of each on disk, so that a job that
// was running when the server stopped is reported lost after the restart
// instead of vanishing. It knows nothing of what a job runs: the engine
// starts the work and reports to it.
package jobs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/mcp-forge/mcp-forge/core/refusal"
)

// State is where a job is in its life.
type State string

// A job is queued (waiting for a run slot), running, then done (the code
// ran to its end without an error), failed (an error of the code or the
// server), cancelled (cancel_job) or lost (the server stopped while it ran).
const (
	Queued    State = "queued"
	Running   State = "running"
	Done      State = "done"
	Failed    State = "failed"
	Cancelled State = "cancelled"
	Lost      State = "lost"
)

// Finished reports whether the job will not change any more.
func (s State) Finished() bool { return s != Queued && s != Running }

// Rules of the refusals this package makes.
const (
	RuleJobNotFound = "job-not-found"
	RuleJobsMax     = "jobs-max"
	RuleJobID       = "job-id"
)

// ErrNoJob is an unknown job id, or one of another client.
var ErrNoJob = errors.New("no job")

// Record is what is known of a job; it is also what is written to disk.
type Record struct {
	ID         string    `json:"id"`
	Client     string    `json:"client"`
	Language   string    `json:"language"`
	SessionID  string    `json:"session_id,omitempty"`
	Backend    string    `json:"backend,omitempty"`
	RunID      string    `json:"run_id,omitempty"`
	CodeSHA256 string    `json:"code_sha256,omitempty"`
	TimeoutS   int       `json:"timeout_s,omitempty"`
	State      State     `json:"state"`
	Reason     string    `json:"reason,omitempty"` // why it failed, was cancelled or lost
	Created    time.Time `json:"created"`
	Started    time.Time `json:"started,omitzero"`
	Finished   time.Time `json:"finished,omitzero"`
	// The last bytes of each stream as the run wrote them (the result has
	// the output as a foreground call returns it), and how much it wrote.
	Stdout      string `json:"stdout,omitempty"`
	Stderr      string `json:"stderr,omitempty"`
	StdoutBytes int64  `json:"stdout_bytes"`
	StderrBytes int64  `json:"stderr_bytes"`
	// Progress counts the output events seen; LastProgress is the latest.
	Progress     int       `json:"progress"`
	LastProgress time.Time `json:"last_progress,omitzero"`
	// Result is the engine's result of a finished job (its JSON form).
	Result json.RawMessage `json:"result,omitempty"`
	// HasResult says a finished job has a result, in a copy without it
	// (Record): a job whose code failed answered its call all the same.
	HasResult bool `json:"has_result,omitempty"`
	// Server is the process that ran the job, as procid names it
	// ("<pid>-<start time>", like the labels of containers and workspaces,
	// so that a reused pid is not taken for it): a record whose server is
	// not this one and that had not finished was lost with it.
	Server ServerID `json:"server,omitempty"`
	// Notices are for the answer that started the job (not kept).
	Notices []string `json:"-"`
}

// ServerID names the server that ran a job: procid's "<pid>-<start
// time>". Records of servers before it hold the bare pid as a JSON number;
// they are read as that pid alone (their start time was not kept).
type ServerID string

// UnmarshalJSON reads the name, or an older record's pid.
func (s *ServerID) UnmarshalJSON(b []byte) error {
	var name string
	if err := json.Unmarshal(b, &name); err == nil {
		*s = ServerID(name)
		return nil
	}
	var pid int
	if err := json.Unmarshal(b, &pid); err != nil {
		return fmt.Errorf("server %s: neither a process name nor a pid: %w", b, err)
	}
	*s = ServerID(strconv.Itoa(pid))
	return nil
}

// Job is one background run.
type Job struct {
	r      *Registry
	done   chan struct{}
	cancel context.CancelCauseFunc

	mu       sync.Mutex
	rec      Record
	out, err tail
	saved    time.Time // when the record was last written while running
	notified time.Time // when output last told the registry's watcher
	lostWhy  string    // Abandon's reason: the job ends lost, however its work ends
	// onDisk: the result is only in the store (Full reads it), so that
	// finished jobs do not hold their results in memory.
	onDisk bool
}

// Registry holds the jobs of every client.
type Registry struct {
	store    *Store // nil: jobs are not kept on disk
	ttl      time.Duration
	max      int
	tailSize int
	server   ServerID
	now      func() time.Time

	mu       sync.Mutex
	jobs     map[string]*Job
	onChange []func(Record) // told of every change (outside the locks)
}

// Options configure a registry.
type Options struct {
	Store        *Store        // where records are kept; nil: memory only
	TTL          time.Duration // how long a finished job is kept
	MaxPerClient int           // jobs one client may hold, finished ones included
	TailBytes    int           // bytes of each stream a job keeps while it runs
	Server       string        // this server's procid.Self(), written in records
}

// New returns a registry with the jobs its store holds: those that had not
// finished when their server stopped are lost, with the reason, and
// returned so that the caller can audit them; finished ones past the TTL
// are removed.
func New(o Options) (*Registry, []Record, error) {
	r := &Registry{store: o.Store, ttl: o.TTL, max: o.MaxPerClient, tailSize: o.TailBytes, server: ServerID(o.Server), now: time.Now, jobs: map[string]*Job{}}
	if r.store == nil {
		return r, nil, nil
	}
	recs, err := r.store.Load()
	if err != nil {
		return nil, nil, err
	}
	var lost []Record
	for _, rec := range recs {
		if !rec.State.Finished() {
			was := rec.State
			rec.State, rec.Finished = Lost, r.now()
			rec.Reason = fmt.Sprintf("the server (process %s) stopped while the job was %s, and its sandbox went with it: run the code again", rec.Server, was)
			if !rec.LastProgress.IsZero() {
				rec.Reason += fmt.Sprintf(" (the output kept is what the job had written by %s)", rec.LastProgress.UTC().Format(time.RFC3339))
			}
			if err := r.store.Save(rec); err != nil {
				return nil, nil, err
			}
			lost = append(lost, rec)
		}
		if r.expired(rec) {
			_ = r.store.Remove(rec.ID)
			continue
		}
		rec.HasResult = rec.HasResult || len(rec.Result) > 0 // a record of a server before the flag
		j := &Job{r: r, rec: rec, done: make(chan struct{}), onDisk: len(rec.Result) > 0}
		j.rec.Result = nil
		close(j.done)
		r.jobs[rec.ID] = j
	}
	return r, lost, nil
}

// OnChange makes fn hear of every change of a job (with those told
// before): its state, and its output at most once a second. fn must not
// block.
func (r *Registry) OnChange(fn func(Record)) {
	r.mu.Lock()
	r.onChange = append(r.onChange, fn)
	r.mu.Unlock()
}

func (r *Registry) expired(rec Record) bool {
	return rec.State.Finished() && r.now().Sub(rec.Finished) > r.ttl
}

// NewID returns a fresh job id.
func NewID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return "job-" + hex.EncodeToString(b)
}

// CheckID refuses a string that cannot be a job id (it may be hostile: a
// path, a megabyte).
func CheckID(id string) error {
	ok := len(id) == 20 && id[:4] == "job-"
	for i := 4; ok && i < len(id); i++ {
		c := id[i]
		ok = c >= '0' && c <= '9' || c >= 'a' && c <= 'f'
	}
	if !ok {
		return refusal.New(RuleJobID, "job_id %s is not a job id: job ids are job- and 16 hex digits, as execute_<language> with background: true returned", refusal.Quoted(id))
	}
	return nil
}

// Add registers a queued job. cancel stops its work. It is refused when
// the client already holds MaxPerClient jobs and none of them has
// finished; otherwise the client's oldest finished job makes room.
func (r *Registry) Add(rec Record, cancel context.CancelCauseFunc) (*Job, error) {
	rec.State, rec.Server = Queued, r.server
	if rec.Created.IsZero() {
		rec.Created = r.now()
	}
	j := &Job{r: r, rec: rec, done: make(chan struct{}), cancel: cancel}
	r.mu.Lock()
	var mine []*Job
	for _, o := range r.jobs {
		if o.rec.Client == rec.Client {
			mine = append(mine, o)
		}
	}
	var evict *Job
	if len(mine) >= r.max {
		for _, o := range mine {
			if v := o.Record(); v.State.Finished() && (evict == nil || v.Finished.Before(evict.Record().Finished)) {
				evict = o
			}
		}
		if evict == nil {
			r.mu.Unlock()
			return nil, refusal.New(RuleJobsMax, "you have %d background jobs running or queued, the limit (jobs.max_per_client = %d): wait for one (wait_job) or cancel one (cancel_job), then start this one",
				len(mine), r.max)
		}
		delete(r.jobs, evict.rec.ID)
		v := evict.Record()
		j.rec.Notices = append(j.rec.Notices, fmt.Sprintf("your job %s (%s at %s) was forgotten to make room: you hold at most %d jobs (jobs.max_per_client)",
			v.ID, v.State, v.Finished.UTC().Format(time.RFC3339), r.max))
	}
	r.jobs[rec.ID] = j
	r.mu.Unlock()
	if evict != nil && r.store != nil {
		_ = r.store.Remove(evict.rec.ID)
	}
	j.save(true)
	j.changed()
	return j, nil
}

// Get returns client's job id; another client's job is not found.
func (r *Registry) Get(client, id string) (*Job, error) {
	if err := CheckID(id); err != nil {
		return nil, err
	}
	r.mu.Lock()
	j := r.jobs[id]
	r.mu.Unlock()
	if j == nil || j.rec.Client != client || r.expired(j.Record()) {
		return nil, &refusal.Error{Rule: RuleJobNotFound, Err: ErrNoJob, Msg: fmt.Sprintf(
			"no job %q of yours: list_jobs shows your jobs; a finished job is kept for jobs.result_ttl (%s) after it ended", id, r.ttl)}
	}
	return j, nil
}

// List returns client's jobs, newest first.
func (r *Registry) List(client string) []Record {
	r.mu.Lock()
	var js []*Job
	for _, j := range r.jobs {
		if j.rec.Client == client {
			js = append(js, j)
		}
	}
	r.mu.Unlock()
	out := make([]Record, 0, len(js))
	for _, j := range js {
		v := j.Record()
		v.Stdout, v.Stderr = "", "" // a list of tails would be megabytes: read the job
		out = append(out, v)
	}
	slices.SortFunc(out, func(a, b Record) int { return b.Created.Compare(a.Created) })
	return out
}

// Sweep removes the finished jobs kept longer than the TTL; it returns
// how many.
func (r *Registry) Sweep() int {
	r.mu.Lock()
	var gone []string
	for id, j := range r.jobs {
		if r.expired(j.Record()) {
			delete(r.jobs, id)
			gone = append(gone, id)
		}
	}
	r.mu.Unlock()
	for _, id := range gone {
		if r.store != nil {
			_ = r.store.Remove(id)
		}
	}
	return len(gone)
}

// Running returns the jobs that have not finished.
func (r *Registry) Running() []*Job {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*Job
	for _, j := range r.jobs {
		if !j.Record().State.Finished() {
			out = append(out, j)
		}
	}
	return out
}

// Full is the job's record with its result, read from the store when it
// is kept there.
func (j *Job) Full() Record {
	v := j.Record()
	j.mu.Lock()
	v.Result, v.Notices = j.rec.Result, j.rec.Notices
	onDisk := j.onDisk
	j.mu.Unlock()
	if onDisk && j.r.store != nil {
		if rec, err := j.r.store.Read(v.ID); err == nil {
			v.Result = rec.Result
		}
	}
	return v
}

// Record is a copy of what is known of the job now, without its result.
func (j *Job) Record() Record {
	j.mu.Lock()
	defer j.mu.Unlock()
	v := j.rec
	v.Result, v.Notices = nil, nil
	if !v.State.Finished() {
		v.Stdout, v.Stderr = j.out.String(), j.err.String()
		v.StdoutBytes, v.StderrBytes = j.out.total, j.err.total
	}
	return v
}

// Done is closed when the job has finished.
func (j *Job) Done() <-chan struct{} { return j.done }

// Start marks the job running: it has its run slot.
func (j *Job) Start(backendName, runID string) {
	j.mu.Lock()
	if j.rec.State != Queued {
		j.mu.Unlock()
		return
	}
	j.rec.State, j.rec.Started = Running, j.r.now()
	j.rec.Backend, j.rec.RunID = backendName, runID
	j.mu.Unlock()
	j.save(true)
	j.changed()
}

// Output adds text the run wrote to stdout (stderr false) or stderr.
func (j *Job) Output(stderr bool, text string) {
	j.mu.Lock()
	t := &j.out
	if stderr {
		t = &j.err
	}
	t.write(text, j.r.tailSize)
	j.rec.Progress++
	now := j.r.now()
	j.rec.LastProgress = now
	notify := now.Sub(j.notified) >= time.Second
	if notify {
		j.notified = now
	}
	j.mu.Unlock()
	j.save(false)
	if notify {
		j.changed()
	}
}

// Cancel stops the job's work with cause; the work ends it (Finish).
func (j *Job) Cancel(cause error) {
	if j.cancel != nil {
		j.cancel(cause)
	}
}

// Abandon ends the job lost, with why, and cancels its work with cause:
// the server is going away, and whatever the work answers (it may answer
// first) the job is lost.
func (j *Job) Abandon(why string, cause error) {
	j.mu.Lock()
	j.lostWhy = why
	j.mu.Unlock()
	j.Cancel(cause)
	j.Finish(Lost, why, nil)
}

// Finish ends the job in state (Done, Failed or Cancelled) with why (for
// Failed and Cancelled) and the result's JSON form. A finished job does
// not change again.
func (j *Job) Finish(state State, why string, result json.RawMessage) {
	j.mu.Lock()
	if j.rec.State.Finished() {
		j.mu.Unlock()
		return
	}
	if j.lostWhy != "" {
		state, why = Lost, j.lostWhy
	}
	j.rec.Stdout, j.rec.Stderr = j.out.String(), j.err.String()
	j.rec.StdoutBytes, j.rec.StderrBytes = j.out.total, j.err.total
	j.rec.State, j.rec.Reason, j.rec.Result, j.rec.Finished = state, why, result, j.r.now()
	j.rec.HasResult = len(result) > 0
	j.mu.Unlock()
	if j.saveFull() && len(result) > 0 {
		j.mu.Lock()
		j.rec.Result, j.onDisk = nil, true
		j.mu.Unlock()
	}
	close(j.done)
	if j.cancel != nil {
		j.cancel(nil) // release the context's resources
	}
	j.changed()
}

// save writes the record: always when force, else (output) at most every
// five seconds, so that a lost job keeps recent output without a write
// per line.
func (j *Job) save(force bool) {
	if j.r.store == nil {
		return
	}
	j.mu.Lock()
	now := j.r.now()
	if j.rec.State.Finished() || !force && now.Sub(j.saved) < 5*time.Second { // a finished record (its result) is saveFull's
		j.mu.Unlock()
		return
	}
	j.saved = now
	j.mu.Unlock()
	rec := j.Record()
	_ = j.r.store.Save(rec) // a disk that fails loses the record of a lost job, not the job
}

// saveFull writes the record with its result; false: there is no store,
// or the write failed (the result then stays in memory).
func (j *Job) saveFull() bool {
	if j.r.store == nil {
		return false
	}
	j.mu.Lock()
	rec := j.rec
	j.mu.Unlock()
	return j.r.store.Save(rec) == nil
}

func (j *Job) changed() {
	j.r.mu.Lock()
	fns := j.r.onChange
	j.r.mu.Unlock()
	if len(fns) == 0 {
		return
	}
	rec := j.Record()
	for _, fn := range fns {
		fn(rec)
	}
}

// tail keeps the last bytes written to a stream and counts them all.
type tail struct {
	buf   []byte
	total int64
	max   int // TailBytes, set by write
}

// write keeps up to 2×max bytes and drops the oldest max only when past
// that, so that each byte is copied a bounded number of times: dropping to
// max on every write copied the whole tail per write (a loop of print()
// in a job cost seconds of the server's CPU per megabyte).
func (t *tail) write(s string, max int) {
	t.total += int64(len(s))
	t.max = max
	t.buf = append(t.buf, s...)
	if max > 0 && len(t.buf) > 2*max {
		t.buf = append(t.buf[:0], t.last(max)...)
	}
}

// last is the buffer's last max bytes (all when max is 0), starting at a
// rune boundary: the tail is shown as text.
func (t *tail) last(max int) []byte {
	if max <= 0 || len(t.buf) <= max {
		return t.buf
	}
	cut := len(t.buf) - max
	for cut < len(t.buf) && t.buf[cut]&0xC0 == 0x80 {
		cut++
	}
	return t.buf[cut:]
}

func (t *tail) String() string { return string(t.last(t.max)) }
