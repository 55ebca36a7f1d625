// Command cri is the e2e harness's minimal crictl (cri-tools is not on the Go module proxy): it lists the
// pod sandboxes and containers of a CRI runtime, and removes them all, through the same CRI client the
// kubelet uses. StopPodSandbox tears down the pod network (CNI DEL) and its network namespace, which
// deleting containers with `ctr` would not.
//
//	cri -endpoint unix:///run/x/containerd.sock ls
//	cri -endpoint unix:///run/x/containerd.sock rm-all
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	internalapi "k8s.io/cri-api/pkg/apis"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	remote "k8s.io/cri-client/pkg"
	"k8s.io/klog/v2"
)

func main() {
	endpoint := flag.String("endpoint", "", "CRI endpoint, e.g. unix:///run/containerd/containerd.sock")
	timeout := flag.Duration("timeout", 2*time.Minute, "overall deadline")
	flag.Parse()
	if *endpoint == "" || flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: cri -endpoint ENDPOINT ls|rm-all")
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	logger := klog.Background()
	rs, err := remote.NewRemoteRuntimeService(*endpoint, 30*time.Second, nil, &logger)
	if err != nil {
		fail(err)
	}
	switch flag.Arg(0) {
	case "ls":
		err = list(ctx, rs)
	case "rm-all":
		err = removeAll(ctx, rs)
	default:
		err = fmt.Errorf("unknown command %q", flag.Arg(0))
	}
	if err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "cri:", err)
	os.Exit(1)
}

func list(ctx context.Context, rs internalapi.RuntimeService) error {
	pods, err := rs.ListPodSandbox(ctx, nil)
	if err != nil {
		return err
	}
	for _, p := range pods {
		fmt.Printf("sandbox %s %s/%s %s\n", p.Id[:13], p.Metadata.Namespace, p.Metadata.Name, p.State)
	}
	containers, err := rs.ListContainers(ctx, nil)
	if err != nil {
		return err
	}
	for _, c := range containers {
		fmt.Printf("container %s %s sandbox=%s %s\n", c.Id[:13], c.Metadata.Name, c.PodSandboxId[:13], c.State)
	}
	return nil
}

// removeAll stops and removes every sandbox (and so its containers); it keeps going past errors and
// reports the first one, so that one stuck pod does not keep the others alive.
func removeAll(ctx context.Context, rs internalapi.RuntimeService) error {
	pods, err := rs.ListPodSandbox(ctx, &runtimeapi.PodSandboxFilter{})
	if err != nil {
		return err
	}
	var first error
	for _, p := range pods {
		if err := rs.StopPodSandbox(ctx, p.Id); err != nil && first == nil {
			first = fmt.Errorf("stop sandbox %s/%s: %w", p.Metadata.Namespace, p.Metadata.Name, err)
		}
		if err := rs.RemovePodSandbox(ctx, p.Id); err != nil && first == nil {
			first = fmt.Errorf("remove sandbox %s/%s: %w", p.Metadata.Namespace, p.Metadata.Name, err)
		}
	}
	containers, err := rs.ListContainers(ctx, nil)
	if err != nil {
		return err
	}
	for _, c := range containers {
		if err := rs.RemoveContainer(ctx, c.Id); err != nil && first == nil {
			first = fmt.Errorf("remove container %s: %w", c.Metadata.Name, err)
		}
	}
	fmt.Printf("removed %d sandboxes, %d leftover containers\n", len(pods), len(containers))
	return first
}
