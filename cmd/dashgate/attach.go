package main

import (
	"fmt"
	"path"
	"strings"

	"github.com/dustin/go-humanize"
)

// parseAttach reads the attachment limits (--attach-max-*, issue 42) into
// c.Attach, and checks --llm-image-models' patterns.
func (c *config) parseAttach() error {
	size := func(flag, v string) (int64, error) {
		n, err := humanize.ParseBytes(v)
		if err != nil || n < 1 || n > 1<<30 {
			return 0, fmt.Errorf("%s %q: want a size from 1B to 1GiB, such as 10MiB", flag, v)
		}
		return int64(n), nil
	}
	var err error
	if c.Attach.MaxBytes, err = size("--attach-max-bytes", c.AttachMaxBytes); err != nil {
		return err
	}
	if c.Attach.MaxTotal, err = size("--attach-max-total", c.AttachMaxTotal); err != nil {
		return err
	}
	if c.AttachMaxFiles < 1 || c.AttachMaxFiles > 1000 {
		return fmt.Errorf("--attach-max-files %d: want 1 to 1000", c.AttachMaxFiles)
	}
	c.Attach.MaxFiles = c.AttachMaxFiles
	if c.Attach.MaxTotal < c.Attach.MaxBytes {
		return fmt.Errorf("--attach-max-total (%s) is below --attach-max-bytes (%s): a message could not carry one largest file",
			c.AttachMaxTotal, c.AttachMaxBytes)
	}
	for _, p := range strings.Split(c.LLMImageModels, ",") {
		if _, err := path.Match(strings.TrimSpace(p), ""); err != nil {
			return fmt.Errorf("--llm-image-models: pattern %q: %w", p, err)
		}
	}
	return nil
}
