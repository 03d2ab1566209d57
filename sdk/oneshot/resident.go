package oneshot

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/hashicorp/go-hclog"
	"github.com/mcp-forge/mcp-forge/sdk/backend"
	"github.com/mcp-forge/mcp-forge/sdk/host"
)

// chanDir is the resident runner's directory: its socket, and whatever
// else the runner keeps to itself.
const chanDir = "/forge/chan"

// runnerEndpoint is the socket a resident runner listens on, declared in
// its intent; the backend reaches it only through the host's Dial.
var runnerEndpoint = host.Endpoint{Name: "runner", Path: chanDir + "/runner.sock"}

// readyTimeout bounds a resident runner's start, container create to ready.
const readyTimeout = 2 * time.Minute

// exitGrace is how long a container may take to exit after its runner
// answered before it is killed. The runner exits right after writing the
// answer (os._exit, quit); this covers its exit under load. A variable for
// the tests.
var exitGrace = time.Second

// resident is a started container whose runner accepted the backend's
// connection and waits for one request on it. The connection is made once,
// when the container is ready, so that a warm run costs no dial.
type resident struct {
	ctr  host.Container
	conn net.Conn

	limit    atomic.Int64  // bytes the answer may take, set before the request goes
	answered chan struct{} // closed once watch has env or err
	env      envelope
	err      error
}

// newResident starts watching conn for the runner's answer.
func newResident(ctr host.Container, conn net.Conn) *resident {
	r := &resident{ctr: ctr, conn: conn, answered: make(chan struct{})}
	go r.watch()
	return r
}

// watch reads the runner's one answer. Before the request the runner
// sends nothing, so whatever ends this wait early (the runner died, or
// wrote out of turn: the limit is still 0) marks the container dead.
func (r *resident) watch() {
	defer close(r.answered)
	br := bufio.NewReader(r.conn)
	if _, r.err = br.Peek(1); r.err == nil {
		r.env, r.err = readEnvelope(br, r.limit.Load())
	}
}

func (r *resident) close() { r.conn.Close() }

// alive reports whether the runner still holds its connection, quiet.
func (r *resident) alive() bool {
	select {
	case <-r.answered:
		return false
	default:
		return true
	}
}

// startError is a container that ended before its runner was ready.
type startError struct {
	ctr host.Container
	why string
}

func (e *startError) Error() string { return e.why }

// residentIntent is the container a resident runner runs in. The command
// opens <meta>/stdout and stderr for appending, so the program's output is
// in files the host reads once the runner says it is done, without waiting
// for the container to exit.
func (b *Backend) residentIntent(image string, req backend.ExecuteRequest) host.Intent {
	runner := map[string]string{"FORGE_CHAN": chanDir}
	if len(b.cfg.WarmPreload) > 0 {
		runner["FORGE_PRELOAD"] = strings.Join(b.cfg.WarmPreload, ",")
	}
	in := b.intent(image, req, runner)
	in.Command = append([]string{"/bin/sh", "-c", `exec "$@" >>"$FORGE_META/stdout" 2>>"$FORGE_META/stderr"`, "sh"}, in.Command...)
	in.Mounts = append(in.Mounts, host.Mount{Subdir: "chan", Target: chanDir})
	in.Endpoints = []host.Endpoint{runnerEndpoint}
	return in
}

// startResident creates and starts a container and waits until its runner
// is ready. The container is removed on any error except a *startError,
// whose container the caller reports on and removes.
func (b *Backend) startResident(ctx context.Context, in host.Intent) (*resident, error) {
	// The create is not cut short (a pool closing mid-refill): a reply lost
	// to a cancel would leave a container made that nothing removes. The
	// host bounds the call; a cancel then ends the start below, which
	// removes the container.
	ctr, err := b.sb.Create(context.WithoutCancel(ctx), in)
	if err != nil {
		return nil, err
	}
	r, err := b.connect(ctx, ctr)
	var se *startError
	if err != nil && !errors.As(err, &se) {
		b.sb.Remove(context.WithoutCancel(ctx), ctr.ID)
	}
	return r, err
}

// startWarmedUp is startResident for a runner whose start (interpreter,
// imports) is the plugin's alone (the configured image, no environment or
// file of a user's): it runs on the host's cores
// (host.Intent.WarmUp), and the container is clamped to its limits once the
// runner is ready, before any code is sent, so no code ever runs beyond
// them.
func (b *Backend) startWarmedUp(ctx context.Context, in host.Intent) (*resident, error) {
	in.WarmUp = true
	r, err := b.startResident(ctx, in)
	if err != nil {
		return nil, err
	}
	if err := b.sb.Clamp(ctx, r.ctr.ID); err != nil {
		r.close()
		b.sb.Remove(context.WithoutCancel(ctx), r.ctr.ID)
		return nil, fmt.Errorf("hold the %s runner's container to its limits: %w", b.spec.Language, err)
	}
	return r, nil
}

// connect starts the container and dials its runner until it accepts:
// KindUnavailable is a runner not listening yet.
func (b *Backend) connect(ctx context.Context, ctr host.Container) (*resident, error) {
	if err := b.sb.Start(ctx, ctr.ID); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(readyTimeout)
	nextCheck := time.Now().Add(100 * time.Millisecond)
	pause := 500 * time.Microsecond
	for {
		conn, err := b.sb.Dial(ctx, ctr.ID, runnerEndpoint.Name)
		if err == nil {
			return newResident(ctr, conn), nil
		}
		if !isKind(err, host.KindUnavailable) {
			return nil, fmt.Errorf("dial the %s runner: %w", b.spec.Language, err)
		}
		if time.Now().After(nextCheck) {
			nextCheck = time.Now().Add(100 * time.Millisecond)
			st, err := b.sb.State(ctx, ctr.ID)
			if err != nil {
				return nil, err
			}
			if !st.Running {
				return nil, &startError{ctr: ctr, why: fmt.Sprintf("the %s runner ended (exit code %d) before it was ready", b.spec.Language, st.ExitCode)}
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("the %s runner was not ready %s after its container started", b.spec.Language, readyTimeout)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(pause):
		}
		pause = min(2*pause, 5*time.Millisecond)
	}
}

func isKind(err error, k host.Kind) bool {
	var he *host.Error
	return errors.As(err, &he) && he.Kind == k
}

// errNotDelivered: the runner ended before it took the request, so the
// code never ran and may run elsewhere.
var errNotDelivered = errors.New("the warm runner ended before it took the code")

type request struct {
	Code      string `json:"code"`
	MaxOutput int64  `json:"max_output"`
	// MaxImage: the runner may put images up to this size in its answer
	// (see inlined); 0: it puts none.
	MaxImage int64 `json:"max_image,omitempty"`
}

// sendTimeout bounds the write of a request: a runner that accepted but
// does not read is not left holding the run.
const sendTimeout = 30 * time.Second

// send gives the runner its one request, a line (JSON escapes the
// newlines inside it), and the size its answer may take.
func (r *resident) send(req request, answerLimit int64) error {
	data, err := json.Marshal(req)
	if err != nil {
		return err
	}
	r.limit.Store(answerLimit)
	_ = r.conn.SetWriteDeadline(time.Now().Add(sendTimeout))
	if _, err = r.conn.Write(append(data, '\n')); err != nil {
		return fmt.Errorf("%w: %v", errNotDelivered, err)
	}
	return nil
}

// errAnswerTooLarge is a runner's answer over its bound (a huge error
// message or value): the runner is still writing it, blocked.
var errAnswerTooLarge = errors.New("the runner's answer is too large")

// readEnvelope reads the runner's one-line answer, at most limit bytes.
func readEnvelope(br *bufio.Reader, limit int64) (envelope, error) {
	var buf bytes.Buffer
	for {
		line, err := br.ReadSlice('\n')
		buf.Write(line)
		if int64(buf.Len()) > limit {
			return envelope{}, fmt.Errorf("%w: over %d bytes", errAnswerTooLarge, limit)
		}
		if err == nil {
			break
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return envelope{}, err
		}
	}
	var env envelope
	if err := json.Unmarshal(buf.Bytes(), &env); err != nil {
		return envelope{}, fmt.Errorf("the runner's answer is not an envelope: %w", err)
	}
	return env, nil
}

// claim gives a warm container of a sandbox class to the run's own grant
// (host.Sandbox.Claim) before any code reaches it; one the core refuses
// is removed, and the run starts cold.
func (b *Backend) claim(ctx context.Context, r *resident, req backend.ExecuteRequest) (*resident, bool) {
	if err := b.sb.Claim(ctx, r.ctr.ID, req.SandboxGrant); err != nil {
		hclog.Default().Warn("the core did not give a warm container to the run's sandbox grant; it runs cold", "run", req.RunID, "error", err)
		r.close()
		b.sb.Remove(context.WithoutCancel(ctx), r.ctr.ID)
		return nil, false
	}
	return r, true
}

// poolKey is what makes two containers differ before the code arrives:
// image, memory limit and the request's environment. Output caps and the
// code travel with the request.
func poolKey(image, memory string, env map[string]string) string {
	var sb strings.Builder
	sb.WriteString(image + "\x00" + memory)
	keys := make([]string, 0, len(env))
	for k := range env {
		if !strings.HasPrefix(k, "FORGE_") {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		sb.WriteString("\x00" + k + "=" + env[k])
	}
	return sb.String()
}

// executeResident runs the code on a warm container of its key, or on one
// started for it; either way the timeout starts when the runner gets the
// code, and the container serves this run only.
// emit, if not nil, receives the program's output while it runs
// (ExecuteStream).
func (b *Backend) executeResident(ctx context.Context, req backend.ExecuteRequest, emit func(backend.StreamEvent)) (backend.ExecuteResult, error) {
	start := time.Now()
	p := b.params(req)
	timeout := req.Timeout
	var r *resident
	warm := false
	// A warm container has neither input files nor a tools directory nor
	// a network channel nor host roots: mounts are fixed when a container
	// is created. A sandbox grant of a class (an isolation alone) takes
	// one of its class's, created with the class's standing grant.
	if b.pool != nil && req.ToolsGrant == "" && req.NetworkGrant == "" && (req.SandboxGrant == "" || req.SandboxPoolGrant != "") && len(req.InputFiles) == 0 {
		need := timeout
		if need <= 0 {
			need = time.Duration(b.cfg.DefaultTimeout) * time.Second
		}
		key := classKey(poolKey(p.image, req.Memory, req.Env), req.SandboxPoolGrant)
		if r, warm = b.pool.Take(key, need); warm {
			defer b.pool.Done()
			if req.SandboxGrant != "" {
				r, warm = b.claim(ctx, r, req)
			}
		} else if req.SandboxGrant != "" && p.image == b.cfg.Image && req.Memory == "" && len(req.Env) == 0 {
			// A class met for the first time (a known one keeps its
			// size): kept warm from its first run on.
			b.pool.AddKey(key, b.poolMem)
		}
		if warm {
			// A warm container's own limit is the longest; a run asking for
			// none gets the default, as a cold one does.
			timeout = need
		}
	}
	for {
		if r == nil {
			in := b.residentIntent(p.image, req)
			in.CodeHash = p.codeHash
			in.Labels = map[string]string{host.LabelRun: req.RunID}
			in.ToolsGrant, in.NetworkGrant, in.SandboxGrant = req.ToolsGrant, req.NetworkGrant, req.SandboxGrant
			var err error
			if in.Mounts, err = addInputFiles(in.Mounts, in.Files, req.InputFiles); err != nil {
				return backend.ExecuteResult{}, err
			}
			// A warm-up allowance only for a container nothing of the user's
			// reaches before the code: an environment, input files, a tools
			// grant or an image of the user's act before the runner is
			// ready (an R profile among the files, a preload named in the
			// environment). Under the default half-core quota it cuts a
			// cold R run from 1.1 s to 0.65 s.
			if len(req.Env) == 0 && len(req.InputFiles) == 0 && req.ToolsGrant == "" && req.NetworkGrant == "" && req.SandboxGrant == "" && p.image == b.cfg.Image {
				r, err = b.startWarmedUp(ctx, in)
			} else {
				r, err = b.startResident(ctx, in)
			}
			var se *startError
			if errors.As(err, &se) {
				return b.failedStart(ctx, req, se, p.maxOut, p.maxImg, start)
			}
			if err != nil {
				return backend.ExecuteResult{}, err
			}
		} else {
			// The container was created before the code existed: the run
			// and its code are audited here.
			if err := b.audit.Record(ctx, host.Event{Event: "warm_run", Success: true, Details: map[string]any{
				"container_id": r.ctr.ID, "code_sha256": p.codeHash, "run_id": req.RunID}}); err != nil {
				// No run without its audit line: the container goes unused.
				r.close()
				b.sb.Remove(context.WithoutCancel(ctx), r.ctr.ID)
				return backend.ExecuteResult{}, err
			}
		}
		res, err := b.runResident(ctx, r, req, timeout, p.maxOut, p.maxImg, start, emit)
		if errors.Is(err, errNotDelivered) && warm {
			// Died idle between the liveness check and the send: the code
			// never ran, so it runs cold.
			r, warm, timeout = nil, false, req.Timeout
			continue
		}
		return res, err
	}
}

type waitOut struct {
	w   host.WaitResult
	err error
}

// runResident sends the code and collects the result. The container is
// removed in the background once it has exited.
func (b *Backend) runResident(ctx context.Context, r *resident, req backend.ExecuteRequest, timeout time.Duration, maxOut, maxImg int64, start time.Time, emit func(backend.StreamEvent)) (backend.ExecuteResult, error) {
	id := r.ctr.ID
	bg := context.WithoutCancel(ctx)
	if !r.alive() {
		r.close()
		b.sb.Remove(bg, id)
		return backend.ExecuteResult{}, errNotDelivered
	}
	if err := r.send(request{Code: req.Code, MaxOutput: maxOut, MaxImage: maxImg}, 4*maxOut+(1<<20)+inlineAnswer); err != nil {
		r.close()
		b.sb.Remove(bg, id)
		return backend.ExecuteResult{}, err
	}
	// The clock starts now, with the code in the runner's hands.
	fw := b.follow(ctx, id, timeout, maxOut, emit)
	defer fw.stop() // first: no output is sent after the result
	wctx, cancelWait := context.WithCancel(bg)
	waitCh := make(chan waitOut, 1)
	go func() {
		w, err := b.sb.Wait(wctx, id, timeout)
		waitCh <- waitOut{w, err}
	}()
	// Once the container has exited (the runner exits right after its
	// answer) and its files are read, remove it; the caller does not wait
	// for that. A container still running exitGrace after the answer runs
	// the code's processes, not the runner (code that wrote an answer
	// itself, a child it forked while the runner sleeps): it is killed,
	// so that no run keeps a sandbox past its answer. The core holds the
	// run's slots until the container is gone.
	waited := false
	defer func() {
		r.close()
		b.bg.Add(1)
		go func() {
			defer b.bg.Done()
			if !waited {
				select {
				case <-waitCh:
				case <-time.After(exitGrace):
					_ = b.sb.Signal(bg, id, "KILL", host.SignalInit)
					<-waitCh
				}
			}
			cancelWait()
			fw.end(followEndWait) // ends with its container, or here
			b.sb.Remove(bg, id)
		}()
	}()
	var o outcome
	select {
	case <-r.answered:
		if r.err == nil {
			o.env = &r.env
			o.w = host.WaitResult{ExitCode: r.env.ExitCode}
			o.fromAnswer(maxOut, maxImg, req.InputFiles)
			break
		}
		if errors.Is(r.err, errAnswerTooLarge) {
			// Nobody reads the rest: the runner would sit blocked on its
			// write, and the call wait for the run's timeout.
			_ = b.sb.Signal(bg, id, "KILL", host.SignalInit)
			o.failure = &backend.ExecError{Name: "OutputTooLarge", Message: "the code ran, but its result or error was too large to return (" + r.err.Error() +
				"): print less, keep large values in files, or catch the exception and report a shorter message"}
		}
		// The channel broke without an answer: the container's end says why.
		wo := <-waitCh
		waited = true
		if wo.err != nil {
			return backend.ExecuteResult{}, wo.err
		}
		o.w = wo.w
	case wo := <-waitCh:
		waited = true
		if wo.err != nil {
			return backend.ExecuteResult{}, wo.err
		}
		o.w = wo.w
		// The answer may have been written just before the exit.
		select {
		case <-r.answered:
			if r.err == nil {
				o.env = &r.env
				o.fromAnswer(maxOut, maxImg, req.InputFiles)
			}
		case <-time.After(20 * time.Millisecond):
		}
	case <-ctx.Done():
		cancelWait() // the host kills a container whose wait is given up
		waited = true
		return backend.ExecuteResult{}, ctx.Err()
	}
	if !o.outputRead {
		b.readOutput(ctx, id, maxOut, &o)
	}
	return b.finish(ctx, req, id, o, maxImg, start), nil
}

// inlineAnswer is what the inlined part may add to an answer: the
// runner's budget (1 MiB, in runner.py and runner.R) in base64, with room.
const inlineAnswer = 2 << 20

// inlined is what a resident runner may put in its answer besides the
// envelope: the program's output and the images in the output directory,
// when they are small. The files are then not read: on Kubernetes each
// read is a round trip through the API server. Each part is absent when
// the runner could not give it (a file descriptor the code replaced, more
// than the budget): the files are read as before. It is the sandbox's word
// like the files themselves, so it is held to the same caps.
type inlined struct {
	Output *struct {
		Stdout []byte `json:"stdout"` // base64 in the JSON
		Stderr []byte `json:"stderr"`
	} `json:"output"`
	Files *[]inlineFile `json:"files"`
}

type inlineFile struct {
	Name string `json:"name"`
	Size int64  `json:"size"`
	Data []byte `json:"data"` // absent: over max_image
}

// maxInlineFiles bounds the images one answer may list.
const maxInlineFiles = 256

// fromAnswer takes the output and the images from the runner's answer,
// held to the caps ReadFiles applies (maxOut per stream; maxImg per
// image, 4*maxImg in all). A part the answer lacks, or that is not what a
// read of the files could give, is read from the files. The run's input
// files are mounted where its images are: they are not its output, and
// count toward nothing.
func (o *outcome) fromAnswer(maxOut, maxImg int64, inputs map[string][]byte) {
	in := o.env.Inline
	o.env.Inline = nil
	if in == nil {
		return
	}
	if out := in.Output; out != nil {
		cut := func(b []byte) []byte { return b[:min(int64(len(b)), maxOut)] }
		o.stdout, o.stderr = cut(out.Stdout), cut(out.Stderr)
		o.stdoutTotal, o.stderrTotal = int64(len(out.Stdout)), int64(len(out.Stderr))
		o.outputRead = true
	}
	if in.Files == nil || len(*in.Files) > maxInlineFiles {
		return
	}
	files := []host.File{}
	total := int64(0)
	for _, f := range *in.Files {
		if f.Name == "" || f.Name == "." || f.Name == ".." || strings.ContainsAny(f.Name, "/\x00") || !utf8.ValidString(f.Name) || f.Size < int64(len(f.Data)) {
			return // not what a listing of the directory gives
		}
		if _, input := inputs[f.Name]; input {
			continue
		}
		hf := host.File{Name: f.Name, Size: f.Size}
		if f.Data == nil || f.Size > maxImg || total+f.Size > 4*maxImg {
			hf.Skipped = true
		} else {
			hf.Data, total = f.Data, total+f.Size
		}
		files = append(files, hf)
	}
	o.files, o.filesRead = files, true
}

// readOutput reads the program's stdout and stderr files. The runner cuts
// them to the cap when it finishes; if it could not (it was killed), a file
// over the cap is not returned and a notice says so.
func (b *Backend) readOutput(ctx context.Context, id string, maxOut int64, o *outcome) {
	files, _ := b.sb.ReadFiles(ctx, id, "meta", maxOut, 2*maxOut)
	for _, f := range files {
		var data *[]byte
		var total *int64
		switch f.Name {
		case "stdout":
			data, total = &o.stdout, &o.stdoutTotal
		case "stderr":
			data, total = &o.stderr, &o.stderrTotal
		default:
			continue
		}
		*total = f.Size
		if f.Skipped {
			o.notices = append(o.notices, fmt.Sprintf("%s (%d bytes) was not returned: over the %d-byte output limit (execution.max_output), and the program ended before the runner could cut it", f.Name, f.Size, maxOut))
			continue
		}
		*data = f.Data
	}
}

// failedStart reports a runner that ended before it was ready (a broken
// image, a runner that cannot start) the way a cold run reports it.
func (b *Backend) failedStart(ctx context.Context, req backend.ExecuteRequest, se *startError, maxOut, maxImg int64, start time.Time) (backend.ExecuteResult, error) {
	id := se.ctr.ID
	defer b.sb.Remove(context.WithoutCancel(ctx), id)
	w, err := b.sb.Wait(ctx, id, 10*time.Second)
	if err != nil {
		return backend.ExecuteResult{}, err
	}
	o := outcome{w: w}
	b.readOutput(ctx, id, maxOut, &o)
	return b.finish(ctx, req, id, o, maxImg, start), nil
}

// startPool starts the warm pool the configuration asks for.
func (b *Backend) startPool() error {
	if !b.spec.Resident {
		if b.cfg.Warm != nil && *b.cfg.Warm > 0 {
			return fmt.Errorf("warm: the %s runner does not keep the resident contract, so no container can be kept warm", b.spec.Language)
		}
		return nil
	}
	size := 0
	if b.cfg.Warm != nil {
		size = *b.cfg.Warm
	} else if b.cfg.Image == b.spec.DefaultImage {
		size = b.spec.Warm
	}
	if size < 0 || size > 64 {
		return fmt.Errorf("warm: %d is outside 0..64", size)
	}
	if size == 0 {
		return nil
	}
	maxSize := min(4*size, 64)
	if b.cfg.WarmMax != nil {
		maxSize = *b.cfg.WarmMax
	}
	if maxSize < size || maxSize > 64 {
		return fmt.Errorf("warm_max: %d is outside warm (%d)..64", maxSize, size)
	}
	memCap, err := parseSize(b.cfg.WarmMemory)
	if err != nil {
		return fmt.Errorf("warm_memory: %w", err)
	}
	per, err := parseSize(b.cfg.DefaultMemory)
	if err != nil || per == 0 {
		per = 512 << 20 // the core's default when it did not say
	}
	// A warm container is created with the longest timeout it may be
	// asked for; the engine bounds its life from its start by that (plus a
	// grace), so an idle one is retired well before.
	life := time.Duration(b.cfg.MaxTimeout) * time.Second
	key := poolKey(b.cfg.Image, "", nil)
	intent := b.residentIntent(b.cfg.Image, backend.ExecuteRequest{Timeout: life})
	intent.Labels = map[string]string{"warm": "true"}
	lifetime := life
	if lifetime <= 0 {
		lifetime = time.Duration(b.cfg.DefaultTimeout) * time.Second
	}
	if lifetime <= 0 {
		lifetime = 5 * time.Minute
	}
	b.poolMem = per
	b.pool = newPool(map[string]int64{key: per}, poolOptions{size: size, maxSize: maxSize, memCap: memCap, maxAge: min(lifetime/2, 10*time.Minute), lifetime: lifetime},
		func(ctx context.Context, key string) (*resident, error) {
			in := intent
			_, in.SandboxGrant = classOf(key)
			r, err := b.startWarmedUp(ctx, in)
			var se *startError
			if errors.As(err, &se) {
				b.sb.Remove(context.WithoutCancel(ctx), se.ctr.ID)
			}
			return r, err
		},
		(*resident).alive,
		func(r *resident) {
			r.close()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			b.sb.Remove(ctx, r.ctr.ID)
		})
	return nil
}

// Pool reports the warm pool's state; ok is false when there is none.
func (b *Backend) Pool() (backend.WarmPool, bool) {
	if b.pool == nil {
		return backend.WarmPool{}, false
	}
	return b.pool.Stats(), true
}

// Close stops refilling, removes the warm containers and waits for the
// removals of used ones still under way.
func (b *Backend) Close() {
	if b.pool != nil {
		b.pool.Close()
	}
	b.bg.Wait()
}

// Shutdown implements backend.Shutdowner: the warm containers are removed
// and the removals of used ones waited for, within ctx. Warm starts under
// way are not waited for (pool.Stop): the core removes their containers.
func (b *Backend) Shutdown(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		if b.pool != nil {
			b.pool.Stop()
		}
		b.bg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("warm containers still being removed: %w", ctx.Err())
	}
}

var _ backend.Shutdowner = (*Backend)(nil)

// parseSize reads "512m", "2g", "1024k" or a number of bytes; "" is 0.
func parseSize(s string) (int64, error) {
	s = strings.TrimSpace(strings.ToLower(s))
	if s == "" {
		return 0, nil
	}
	mult := int64(1)
	switch {
	case strings.HasSuffix(s, "k"):
		mult, s = 1<<10, strings.TrimSuffix(s, "k")
	case strings.HasSuffix(s, "m"):
		mult, s = 1<<20, strings.TrimSuffix(s, "m")
	case strings.HasSuffix(s, "g"):
		mult, s = 1<<30, strings.TrimSuffix(s, "g")
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%q is not a size (a number of bytes, or with k, m or g)", s)
	}
	return n * mult, nil
}
