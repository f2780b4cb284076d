// What an Agent Client Protocol agent adds to the chat pane (docs/PROTOCOL.md,
// "Agents of the Agent Client Protocol"): its plan and its slash commands.
//
// The plan (plan.update, session.resume's plan) is a checklist,
//   <ol data-testid="plan-list">
//     <li data-testid="plan-entry" data-status="pending|in_progress|completed" data-priority>content</li>
//   </ol>
// replaced whole each time; the mark of a status is drawn by CSS (app.css),
// so that an entry's textContent stays its content.
//
// The commands (commands.update, session.resume's commands) show while the
// input holds "/" and the first letters of a command's name:
//   <ul data-testid="slash-list">
//     <li data-testid="slash-command" data-name>
//       <span class="slash-name">/name</span> <span class="slash-hint">hint</span>
//       <span class="slash-description">description</span>
//     </li>
//   </ul>
// Every text is the agent's: it is set with textContent.

const STATUS_WORDS = { pending: 'to do', in_progress: 'in progress', completed: 'done' };

/** Renders a plan's entries ([{content, priority, status}]) into ol. */
export function renderPlan(ol, entries) {
	ol.replaceChildren(
		...entries
			.filter((e) => e && typeof e === 'object')
			.map((e) => {
				const li = document.createElement('li');
				li.className = 'plan-entry';
				li.dataset.testid = 'plan-entry';
				const status = typeof e.status === 'string' ? e.status : 'pending';
				li.dataset.status = status;
				if (typeof e.priority === 'string') li.dataset.priority = e.priority;
				li.textContent = String(e.content ?? '');
				li.title = STATUS_WORDS[status] ?? status;
				return li;
			}),
	);
}

/**
 * The commands ([{name, description, hint}]) that what the input holds
 * (value) is the start of: value is "/" and a name's first letters, with
 * no space yet; none otherwise.
 */
export function slashMatches(commands, value) {
	const m = /^\/(\S*)$/.exec(value);
	if (!m) return [];
	const typed = m[1].toLowerCase();
	return commands.filter((c) => c.name.toLowerCase().startsWith(typed) && c.name.toLowerCase() !== typed);
}

/** Renders the commands into ul. */
export function renderCommands(ul, commands) {
	ul.replaceChildren(
		...commands.map((c) => {
			const li = document.createElement('li');
			li.className = 'slash-command';
			li.dataset.testid = 'slash-command';
			li.dataset.name = c.name;
			li.setAttribute('role', 'option');
			const name = document.createElement('span');
			name.className = 'slash-name';
			name.textContent = '/' + c.name;
			li.append(name);
			if (typeof c.hint === 'string' && c.hint) {
				const hint = document.createElement('span');
				hint.className = 'slash-hint';
				hint.textContent = c.hint;
				li.append(' ', hint);
			}
			if (typeof c.description === 'string' && c.description) {
				const d = document.createElement('span');
				d.className = 'slash-description';
				d.textContent = c.description;
				li.append(d);
			}
			return li;
		}),
	);
}
