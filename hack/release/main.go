// Command release is `make release`: it builds kubectl-carousel (Linux,
// macOS and Windows) and carousel-node-agent (Linux) for each of their
// platforms with the build command it is given, writes their archives (the
// program, the plugin's completion script, the license file), a
// SHA256SUMS of them and the plugin's krew manifest (carousel.yaml) into one
// directory, and has krew check the manifest: krew's validate-krew-manifest,
// then a `krew install` of each platform from its archive. Any failure fails
// the release.
//
//	go run ./hack/release -version 0.1.0 -out bin/release -source-date-epoch 1700000000 \
//	  -krew bin/krew -validate-krew-manifest bin/validate-krew-manifest -- go build -trimpath -ldflags '...'
//
// The archives are reproducible: the same sources, build command and Go
// toolchain give the same bytes (see writeTarGz).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"time"
)

const repository = "https://github.com/carousel-dev/carousel"

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

func run(args []string, log io.Writer) error {
	fs := flag.NewFlagSet("release", flag.ContinueOnError)
	var c config
	var epoch int64
	var krew, validator string
	fs.StringVar(&c.Version, "version", "", "the release, MAJOR.MINOR.PATCH[-PRERELEASE] (the VERSION file); its tag is v<version>")
	fs.StringVar(&c.Out, "out", "", "the directory to write the release to; emptied first")
	fs.StringVar(&c.License, "license", "LICENSE", "the license file each archive carries, if it exists")
	fs.Int64Var(&epoch, "source-date-epoch", envInt64("SOURCE_DATE_EPOCH"), "the modification time of the archives' entries, in seconds since 1970 (default $SOURCE_DATE_EPOCH)")
	fs.StringVar(&c.DownloadBase, "download-base", repository+"/releases/download", "where the release's assets are downloaded from, as <download-base>/<tag>/<archive>")
	fs.StringVar(&c.Homepage, "homepage", repository, "the plugin's homepage in its krew manifest")
	fs.StringVar(&krew, "krew", "", "krew (sigs.k8s.io/krew/cmd/krew), to install the plugin from each archive")
	fs.StringVar(&validator, "validate-krew-manifest", "", "krew's validate-krew-manifest (sigs.k8s.io/krew/cmd/validate-krew-manifest)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: release [flags] -- BUILD COMMAND (without -o and package)")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	buildCommand := fs.Args()
	switch {
	case len(buildCommand) == 0:
		return errors.New("no build command after the flags (for example: -- go build -trimpath)")
	case krew == "" || validator == "":
		return errors.New("-krew and -validate-krew-manifest are required: a release's manifest is checked by krew")
	case epoch <= 0:
		return errors.New("-source-date-epoch (or $SOURCE_DATE_EPOCH) is required, for instance the last commit's time")
	}
	c.MTime = time.Unix(epoch, 0).UTC()
	c.Root = "."
	if _, err := os.Stat(c.License); err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			return err
		}
		fmt.Fprintf(log, "release: no %s: the archives carry no license (krew-index accepts a plugin only with a license file in its archives)\n", c.License)
		c.License = ""
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	staging, err := os.MkdirTemp("", "carousel-release-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(staging)
	c.Staging = staging

	start := time.Now()
	artifacts, err := release(ctx, c, goBuilder(buildCommand, log))
	if err != nil {
		return err
	}
	fmt.Fprintf(log, "release: built and archived in %s\n", time.Since(start).Round(time.Second))
	if err := checkWithKrew(ctx, c, validator, krew, artifacts, log); err != nil {
		return fmt.Errorf("krew refuses %s: %w", filepath.Join(c.Out, manifestFile), err)
	}
	fmt.Fprintf(log, "release: %s (%s):\n", c.Out, c.tag())
	for _, name := range append(archiveNames(artifacts), sumsFile, manifestFile) {
		info, err := os.Stat(filepath.Join(c.Out, name))
		if err != nil {
			return err
		}
		fmt.Fprintf(log, "  %10d  %s\n", info.Size(), name)
	}
	return nil
}

// goBuilder builds with command (go build and its flags) for a platform:
// CGO_ENABLED=0 and the baseline of each architecture, whatever the
// environment says, so that the programs run on every machine of their
// platform and the build is the same everywhere. -buildvcs=false leaves out
// what go build would record of the work tree: the revision is stamped in
// by the build command (the Makefile's BUILD_FLAGS) already.
func goBuilder(command []string, log io.Writer) builder {
	return func(ctx context.Context, binary string, p platform, out string) error {
		fmt.Fprintf(log, "release: build %s for %s\n", binary, p)
		args := append(append([]string{}, command[1:]...), "-buildvcs=false", "-o", out, "./cmd/"+binary)
		cmd := exec.CommandContext(ctx, command[0], args...)
		cmd.Env = append(os.Environ(),
			"GOOS="+p.OS, "GOARCH="+p.Arch, "CGO_ENABLED=0",
			"GOAMD64=v1", "GOARM64=v8.0")
		cmd.Stdout, cmd.Stderr = log, os.Stderr
		return cmd.Run()
	}
}

func archiveNames(artifacts []artifact) []string {
	names := make([]string, 0, len(artifacts))
	for _, a := range artifacts {
		names = append(names, a.Name)
	}
	return names
}

func envInt64(name string) int64 {
	v, err := strconv.ParseInt(os.Getenv(name), 10, 64)
	if err != nil {
		return 0
	}
	return v
}
