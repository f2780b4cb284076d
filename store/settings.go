package store

// Per-user settings (issue 42): what a user chose for the sessions they
// make and for the page they see. Each owner has one row, a JSON document
// of Settings' fields ("" is the anonymous user's, as for sessions); a
// user who never chose has none, and reads as the zero Settings.
//
// A document, not a column a field: the fields are a user's preferences,
// read and written whole by their owner only, never selected by or joined
// on in SQL. A new preference is then a new Go field, not a migration on
// two dialects that a node of the previous release would refuse to open,
// and a document a newer release wrote reads here with its unknown fields
// left out. A partial update is still one statement that merges the given
// fields into the stored document in the database (SQLite json_patch,
// PostgreSQL jsonb ||): nobody reads the row to rewrite it, so two tabs
// saving different fields at once both keep theirs. The values are
// checked where they come in (handlers, settings.set), not here.

// Settings is one user's settings. A zero field is one the user has not
// chosen: the server's default applies (--default-agent, --llm-model), or
// the page's (theme, terminal font).
type Settings struct {
	DefaultAgent       string `json:"default_agent"`        // an agent.list name a new session takes
	DefaultModel       string `json:"default_model"`        // a model.list id a new session takes
	SystemPrompt       string `json:"system_prompt"`        // given to the model before the conversation
	Theme              string `json:"theme"`                // system, light or dark
	TerminalFontSize   int    `json:"terminal_font_size"`   // CSS pixels
	TerminalFontFamily string `json:"terminal_font_family"` // a CSS font-family list
}

// SettingsPatch is a partial update of Settings: a nil field is left as
// stored, a set one replaces it ("" or 0 go back to the default).
// Marshalled, it holds only its set fields, under Settings' names.
type SettingsPatch struct {
	DefaultAgent       *string `json:"default_agent,omitempty"`
	DefaultModel       *string `json:"default_model,omitempty"`
	SystemPrompt       *string `json:"system_prompt,omitempty"`
	Theme              *string `json:"theme,omitempty"`
	TerminalFontSize   *int    `json:"terminal_font_size,omitempty"`
	TerminalFontFamily *string `json:"terminal_font_family,omitempty"`
}

// Apply returns s with p's set fields in place of its own.
func (p SettingsPatch) Apply(s Settings) Settings {
	set := func(dst *string, v *string) {
		if v != nil {
			*dst = *v
		}
	}
	set(&s.DefaultAgent, p.DefaultAgent)
	set(&s.DefaultModel, p.DefaultModel)
	set(&s.SystemPrompt, p.SystemPrompt)
	set(&s.Theme, p.Theme)
	set(&s.TerminalFontFamily, p.TerminalFontFamily)
	if p.TerminalFontSize != nil {
		s.TerminalFontSize = *p.TerminalFontSize
	}
	return s
}
