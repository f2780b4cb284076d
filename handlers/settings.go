package handlers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/dashgate/dashgate/sessions"
	"github.com/dashgate/dashgate/store"
)

// Per-user settings (issue 42): settings.get and settings.set. The
// server's flags stay the limits: a default agent must be one agent.list
// offers, a default model one model.list lists, checked when it is set
// and again when a session takes it (userDefaults).

// Settings limits (settings.set).
const (
	MaxSystemPrompt = 8 << 10 // bytes
	MinTerminalFont = 8       // CSS pixels
	MaxTerminalFont = 32      // CSS pixels
	MaxFontFamily   = 200     // bytes of a CSS font-family list
)

// Themes are the values of a settings theme ("": the page's own choice).
var Themes = []string{"system", "light", "dark"}

// settingsParams are settings.set's: the fields to change, each absent
// (or null) to keep it, "" or 0 to go back to the default.
type settingsParams store.SettingsPatch

func (p *settingsParams) check() *RPCError {
	if t := p.Theme; t != nil && *t != "" && !slices.Contains(Themes, *t) {
		return invalidParams(`invalid params: theme must be "system", "light" or "dark" ("" for the page's own)`)
	}
	if n := p.TerminalFontSize; n != nil && *n != 0 && (*n < MinTerminalFont || *n > MaxTerminalFont) {
		return invalidParams(fmt.Sprintf("invalid params: terminal_font_size must be between %d and %d (0 for the page's default)", MinTerminalFont, MaxTerminalFont))
	}
	if f := p.TerminalFontFamily; f != nil {
		if len(*f) > MaxFontFamily {
			return invalidParams("invalid params: terminal_font_family is over 200 bytes")
		}
		if strings.ContainsFunc(*f, func(r rune) bool {
			return !unicode.IsLetter(r) && !unicode.IsDigit(r) && !strings.ContainsRune(` ,'"-_.`, r)
		}) {
			return invalidParams(`invalid params: terminal_font_family is a list of font names: letters, digits, spaces and , ' " - _ . only`)
		}
	}
	if s := p.SystemPrompt; s != nil {
		if len(*s) > MaxSystemPrompt {
			return invalidParams("invalid params: system_prompt is over 8 KiB")
		}
		if strings.ContainsRune(*s, 0) {
			return invalidParams("invalid params: system_prompt holds a NUL character")
		}
	}
	if m := p.DefaultModel; m != nil && len(*m) > MaxModel {
		return invalidParams("invalid params: default_model is over 200 bytes")
	}
	return nil
}

// settingsGet answers the principal's settings (store.Settings, every
// field; zero ones are not chosen). It reads no params.
func (c *chatConn) settingsGet(ctx context.Context, _ json.RawMessage) (any, func(), error) {
	s, err := c.h.Registry.Settings(ctx, c.who)
	if err != nil {
		return nil, nil, settingsErr(err)
	}
	return s, nil, nil
}

// settingsSet changes the fields its params name of the principal's
// settings, once each is valid (check, then the agent and model lists),
// and answers the settings after it, as settings.get.
func (c *chatConn) settingsSet(ctx context.Context, raw json.RawMessage) (any, func(), error) {
	var p settingsParams
	if err := readParams(raw, &p); err != nil {
		return nil, nil, err
	}
	if a := p.DefaultAgent; a != nil && *a != "" && !c.h.offersAgent(*a) {
		return nil, nil, invalidParams(fmt.Sprintf("invalid params: default_agent %q is no agent this server offers (agent.list names them)", *a))
	}
	if m := p.DefaultModel; m != nil && *m != "" {
		ok, err := c.h.offersModel(ctx, *m)
		if err != nil {
			return nil, nil, err
		}
		if !ok {
			return nil, nil, invalidParams(fmt.Sprintf("invalid params: default_model %q is no model the model server lists (model.list names them)", *m))
		}
	}
	s, err := c.h.Registry.PutSettings(ctx, c.who, store.SettingsPatch(p))
	if err != nil {
		return nil, nil, settingsErr(err)
	}
	return s, nil, nil
}

// settingsErr says what ErrNotFound means here: the admin token, which
// owns nothing, has no settings.
func settingsErr(err error) error {
	if errors.Is(err, sessions.ErrNotFound) {
		return &RPCError{Code: CodeNotFound, Message: "the admin token has no settings: sign in as a user"}
	}
	return err
}

// agents is what agent.list answers.
func (h *Chat) agents() []AgentInfo {
	if len(h.Agents) == 0 {
		return []AgentInfo{{Name: sessions.BuiltinAgent, Kind: "builtin", Default: true}}
	}
	return h.Agents
}

// offersAgent reports whether agent.list names agent.
func (h *Chat) offersAgent(agent string) bool {
	return slices.ContainsFunc(h.agents(), func(a AgentInfo) bool { return a.Name == agent })
}

// offersModel reports whether model.list lists model (none without a
// model server). Errors: the lister's (a *workers.Error, 5004).
func (h *Chat) offersModel(ctx context.Context, model string) (bool, error) {
	if h.Models == nil {
		return false, nil
	}
	models, _, err := h.Models(ctx)
	if err != nil {
		return false, err
	}
	return slices.Contains(models, model), nil
}

// defaultsTimeout bounds what session.create spends on a user's
// defaults: the settings read and the model server's list.
const defaultsTimeout = 3 * time.Second

// userDefaults is the agent and model a session.create asking for agent
// gets: agent, or when it is "" the user's default agent while agent.list
// still offers it; for a session of the built-in worker, the user's
// default model while model.list still lists it. Anything else (no
// settings, an agent or model the server dropped since, a store or model
// server that cannot say) leaves the server's defaults: "" for both.
func (c *chatConn) userDefaults(ctx context.Context, agent string) (string, string) {
	ctx, cancel := context.WithTimeout(ctx, defaultsTimeout)
	defer cancel()
	st, err := c.h.Registry.Settings(ctx, c.who)
	if err != nil {
		if !errors.Is(err, sessions.ErrNotFound) { // the admin token: Create refuses it
			c.log.Warn("settings read", "err", err)
		}
		return agent, ""
	}
	if agent == "" && st.DefaultAgent != "" && c.h.offersAgent(st.DefaultAgent) {
		agent = st.DefaultAgent
	}
	if st.DefaultModel == "" || !c.h.builtin(agent) {
		return agent, ""
	}
	ok, err := c.h.offersModel(ctx, st.DefaultModel)
	if err != nil {
		c.log.Warn("model list for a default model", "err", err)
	}
	if !ok {
		return agent, ""
	}
	return agent, st.DefaultModel
}

// builtin reports whether a session asking for agent talks to the
// built-in worker (agent.list's kind builtin; "" the default one).
func (h *Chat) builtin(agent string) bool {
	for _, a := range h.agents() {
		if a.Name == agent || agent == "" && a.Default {
			return a.Kind == "builtin"
		}
	}
	return false
}
