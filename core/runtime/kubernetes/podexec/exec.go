// Package podexec is how the Kubernetes runtime talks to a pod's
// containers: through the API server's exec and attach subresources (the
// core needs no pod network), as one exec, as the long-lived connection to
// a pod's file service (the agent's serve, answering typed requests), or as
// the relay that carries the connections a sandbox opens on the copied
// sockets of the core's directories (the agent's listen). It knows the
// agent's wire protocol, not which pod or command: the runtime says what
// each exec runs where.
package podexec

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"
	// client-go's executors fail with this package's UpgradeFailureError;
	// apimachinery's httpstream has a type of its own that never matches.
	"k8s.io/streaming/pkg/httpstream"
)

// Stream is one exec or attach: its container, its command (nil for
// attach) and streams.
type Stream struct {
	Container      string
	Command        []string // nil: attach to the container's own stdin
	Stdin          io.Reader
	Stdout, Stderr io.Writer
}

// Func runs s in pod and returns the command's exit code (0 for an attach
// that ended).
type Func func(ctx context.Context, pod string, s Stream) (int, error)

// Run runs one exec of the runtime's choosing with these streams, until
// ctx ends or its command exits, and returns its exit code.
type Run func(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer) (int, error)

// API runs s in pod of namespace ns through the API server rc names:
// WebSocket (what current API servers prefer), SPDY where the upgrade
// fails.
func API(ctx context.Context, rc *rest.Config, ns, pod string, s Stream) (int, error) {
	// The request is built from the REST config, not from the clientset's
	// REST client: it is only a URL here (the executors dial it), and a
	// fake clientset has no REST client, so tests exec against their own
	// API server endpoint.
	if rc == nil {
		return -1, errors.New("exec in a pod needs the API server's REST config (NewWithClient was given none)")
	}
	cfg := rest.CopyConfig(rc)
	cfg.APIPath, cfg.GroupVersion = "/api", &corev1.SchemeGroupVersion
	base, versioned, err := rest.DefaultServerUrlFor(cfg)
	if err != nil {
		return -1, fmt.Errorf("the API server's address %q: %w", rc.Host, err)
	}
	req := rest.NewRequestWithClient(base, versioned, rest.ClientContentConfig{GroupVersion: corev1.SchemeGroupVersion}, nil).
		Verb(http.MethodPost).Resource("pods").Namespace(ns).Name(pod)
	if s.Command == nil {
		req = req.SubResource("attach").VersionedParams(&corev1.PodAttachOptions{
			Container: s.Container, Stdin: s.Stdin != nil, Stdout: s.Stdout != nil, Stderr: s.Stderr != nil}, scheme.ParameterCodec)
	} else {
		req = req.SubResource("exec").VersionedParams(&corev1.PodExecOptions{
			Container: s.Container, Command: s.Command, Stdin: s.Stdin != nil, Stdout: s.Stdout != nil, Stderr: s.Stderr != nil}, scheme.ParameterCodec)
	}
	ws, err := remotecommand.NewWebSocketExecutor(rc, http.MethodGet, req.URL().String())
	if err != nil {
		return -1, err
	}
	spdy, err := remotecommand.NewSPDYExecutor(rc, http.MethodPost, req.URL())
	if err != nil {
		return -1, err
	}
	ex, err := remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	if err != nil {
		return -1, err
	}
	err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: s.Stdin, Stdout: s.Stdout, Stderr: s.Stderr})
	var code utilexec.CodeExitError
	if errors.As(err, &code) {
		return code.Code, nil
	}
	if err != nil {
		return -1, err
	}
	return 0, nil
}
