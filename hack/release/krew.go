package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// checkWithKrew has krew's own code check the release's manifest:
//
//   - validate-krew-manifest -skip-install, the validator krew-index's CI
//     runs: a manifest's structure (apiVersion, kind, the name matching the file's,
//     a one-line short description, a semantic version, each platform's
//     uri, sha256, bin, files and selector), that every platform selects an
//     OS/arch krew supports, and that no two select the same one. Its own
//     install step downloads the uris, which do not exist before the release
//     is published, and runs `kubectl krew`: the install below does the same
//     with the local archives.
//   - for each platform of the plugin, `krew install --manifest --archive`
//     into an empty KREW_ROOT, as that OS and architecture: krew checks the
//     archive against the manifest's sha256, unpacks it, copies the `files`
//     and links `bin`. The linked program must then be the one built, and
//     the archive's other files (the completion script, the license) must
//     have been installed beside it.
func checkWithKrew(ctx context.Context, c config, validator, krew string, artifacts []artifact, log io.Writer) error {
	manifest := filepath.Join(c.Out, manifestFile)
	cmd := exec.CommandContext(ctx, validator, "-manifest", manifest, "-skip-install")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("validate-krew-manifest: %w\n%s", err, indentOutput(out))
	}
	fmt.Fprintf(log, "release: %s\n%s", strings.Join(cmd.Args, " "), indentOutput(out))
	for _, a := range artifacts {
		if a.Component.Binary != pluginComponent.Binary {
			continue
		}
		if err := krewInstall(ctx, c, krew, manifest, a); err != nil {
			return fmt.Errorf("krew install for %s: %w", a.Platform, err)
		}
		fmt.Fprintf(log, "release: krew installs %s for %s from %s\n", pluginName, a.Platform, a.Name)
	}
	return nil
}

func krewInstall(ctx context.Context, c config, krew, manifest string, a artifact) error {
	root, err := os.MkdirTemp("", "carousel-release-krew-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(root)
	cmd := exec.CommandContext(ctx, krew, "install", "--manifest", manifest, "--archive", filepath.Join(c.Out, a.Name))
	cmd.Env = append(os.Environ(),
		"KREW_ROOT="+root, "KREW_OS="+a.Platform.OS, "KREW_ARCH="+a.Platform.Arch,
		"KREW_NO_UPGRADE_CHECK=1",
		// krew warns when its bin directory is not on the PATH.
		"PATH="+filepath.Join(root, "bin")+string(os.PathListSeparator)+os.Getenv("PATH"))
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%w\n%s", err, indentOutput(out))
	}

	// krew names the link after the plugin, as kubectl looks it up.
	link := filepath.Join(root, "bin", exe("kubectl-"+pluginName, a.Platform))
	installed, err := filepath.EvalSymlinks(link)
	if err != nil {
		return fmt.Errorf("krew linked no program: %w", err)
	}
	got, err := os.ReadFile(installed)
	if err != nil {
		return err
	}
	want, err := os.ReadFile(a.Built)
	if err != nil {
		return err
	}
	if !bytes.Equal(got, want) {
		return fmt.Errorf("%s is not the %s built for %s", link, a.Binary, a.Platform)
	}
	for _, m := range a.Members[1:] {
		if _, err := os.Stat(filepath.Join(filepath.Dir(installed), m.Name)); err != nil {
			return fmt.Errorf("%s was not installed beside the program: %w", m.Name, err)
		}
	}
	return nil
}

// indentOutput indents a command's output under the line that ran it.
func indentOutput(out []byte) string {
	text := strings.TrimRight(string(out), "\n")
	if text == "" {
		return ""
	}
	return "    " + strings.ReplaceAll(text, "\n", "\n    ") + "\n"
}
