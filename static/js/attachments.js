// Files attached to the next prompt (issue 42; docs/PROTOCOL.md, "Files
// into the chat").
//
// A file picked with the Attach button (its hidden <input type=file>),
// dropped on the chat pane or pasted into the input is uploaded at once
// into the current session (POST sessions/<id>/attachments?name=, its
// bytes as the body) and shown as a chip under the input:
//   <li class="attach-chip" data-testid="attach-chip" data-state="uploading|ready" data-id? data-kind?>
//     <span class="attach-name">name</span> <span class="attach-size">12 KiB</span>
//     <button data-testid="attach-remove" aria-label="Remove name">×</button>
//   </li>
// Remove takes an uploaded file back (DELETE sessions/<id>/attachments/<aid>).
// The prompt sent next carries the ready chips' ids (prompt.submit's
// attachments); the tray empties once it was accepted.
//
// The limits come with gateway.ready ({max_bytes, max_files, max_total}):
// a file over them is refused here, before any upload, in the server's
// words (data-testid="attach-error"); the server refuses the same with
// error 4013 (413 over HTTP), whose message is shown the same way.
//
// In the history a prompt's files are links (renderAttachments): an image
// as a thumbnail, anything else as a chip with its name and size; each
// downloads from GET sessions/<id>/attachments/<aid> (its owner only).

/** Says a size as the server does (sessions.FormatBytes): "512 B", "1.5 KiB", "10 MiB". */
export function formatBytes(n) {
	const units = ['B', 'KiB', 'MiB', 'GiB'];
	let i = 0;
	let v = Number(n) || 0;
	if (v < 1024) return `${v} B`;
	while (v >= 1024 && i < units.length - 1) {
		v /= 1024;
		i++;
	}
	return `${v.toFixed(1).replace(/\.0$/, '')} ${units[i]}`;
}

/** The server's words for a limit (sessions.AttachLimitError). */
export function limitMessage(limit, max, got, name) {
	switch (limit) {
		case 'bytes':
			return `${name} is ${formatBytes(got)}: a file may be at most ${formatBytes(max)} (--attach-max-bytes)`;
		case 'files':
			return `${got} files: a message may carry at most ${max} (--attach-max-files)`;
		default:
			return `${formatBytes(got)} of files: a message may carry at most ${formatBytes(max)} in all (--attach-max-total)`;
	}
}

/**
 * A pasted file under a name of its own: browsers name every pasted
 * image "image.png" (a screenshot, a copied picture), so two of them were
 * two chips of one name; it becomes "pasted-20261206-101502.png" (local
 * time), "-2", "-3" for more in a second. Other names are kept.
 */
let lastPaste = { stamp: '', n: 0 };
export function pastedName(f, now = new Date()) {
	if (!/^image\.[a-z0-9]+$/i.test(f.name)) return f;
	const p = (n) => String(n).padStart(2, '0');
	const stamp = `${now.getFullYear()}${p(now.getMonth() + 1)}${p(now.getDate())}-${p(now.getHours())}${p(now.getMinutes())}${p(now.getSeconds())}`;
	lastPaste = lastPaste.stamp === stamp ? { stamp, n: lastPaste.n + 1 } : { stamp, n: 1 };
	const ext = f.name.slice(f.name.lastIndexOf('.'));
	const name = `pasted-${stamp}${lastPaste.n > 1 ? `-${lastPaste.n}` : ''}${ext}`;
	return new File([f], name, { type: f.type, lastModified: f.lastModified });
}

/** The URL of a session's attachment (or of its attachments, without aid). */
export function attachmentURL(base, sid, aid) {
	const u = `${base}sessions/${encodeURIComponent(sid)}/attachments`;
	return aid ? `${u}/${encodeURIComponent(aid)}` : u;
}

/**
 * Renders a prompt's files (history entry "attachments") into a
 * <div class="attachments" data-testid="attachments">: each a link
 * (data-testid="attachment", data-kind) to its download, an image's
 * holding its thumbnail (data-testid="attachment-thumb"). url(aid) is the
 * file's URL; null when the session is unknown (then names only).
 */
export function renderAttachments(files, url) {
	const box = document.createElement('div');
	box.className = 'attachments';
	box.dataset.testid = 'attachments';
	for (const f of files) {
		const href = url ? url(f.id) : null;
		const a = document.createElement(href ? 'a' : 'span');
		a.className = 'attachment';
		a.dataset.testid = 'attachment';
		a.dataset.kind = f.kind ?? '';
		a.dataset.id = f.id ?? '';
		a.title = `${f.name} (${f.type || f.kind}, ${formatBytes(f.size)})`;
		if (href) {
			a.href = href;
			if (f.kind === 'image') {
				a.target = '_blank';
				a.rel = 'noopener';
			} else {
				a.download = f.name;
			}
		}
		if (f.kind === 'image' && href) {
			const img = document.createElement('img');
			img.className = 'attachment-thumb';
			img.dataset.testid = 'attachment-thumb';
			img.src = href;
			img.alt = f.name;
			img.loading = 'lazy';
			a.append(img);
		}
		const name = document.createElement('span');
		name.className = 'attachment-name';
		name.textContent = f.name;
		const size = document.createElement('span');
		size.className = 'attachment-size';
		size.textContent = formatBytes(f.size);
		a.append(name, size);
		box.append(a);
	}
	return box;
}

export class AttachmentTray {
	#base;
	#els;
	#session; // () => Promise<string|null>: the current session's id, made when there is none
	#limits = { max_bytes: 10 << 20, max_files: 10, max_total: 20 << 20 };
	#sid = null; // the current session (sessionChanged)
	#uploads = 0; // uploads in flight
	#inflight = new Set(); // their promises

	/**
	 * @param {string} base the base path ("/...")
	 * @param {{tray: HTMLElement, chips: HTMLElement, error: HTMLElement,
	 *          button: HTMLElement, input: HTMLInputElement,
	 *          drop: HTMLElement, paste: HTMLElement}} els
	 * @param {() => Promise<string|null>} session
	 */
	constructor(base, els, session) {
		this.#base = base;
		this.#els = els;
		this.#session = session;
		els.button.addEventListener('click', () => els.input.click());
		els.input.addEventListener('change', () => {
			const files = [...els.input.files];
			els.input.value = '';
			this.add(files);
		});
		els.chips.addEventListener('click', (ev) => {
			const b = ev.target instanceof Element ? ev.target.closest('[data-testid="attach-remove"]') : null;
			if (b) this.#remove(b.closest('[data-testid="attach-chip"]'));
		});
		els.paste.addEventListener('paste', (ev) => {
			const files = [...(ev.clipboardData?.files ?? [])].map((f) => pastedName(f));
			if (files.length === 0) return; // text pastes as text
			ev.preventDefault();
			this.add(files);
		});
		const hasFiles = (ev) => [...(ev.dataTransfer?.types ?? [])].includes('Files');
		let depth = 0;
		els.drop.addEventListener('dragenter', (ev) => {
			if (!hasFiles(ev)) return;
			depth++;
			els.drop.classList.add('drop-target');
		});
		els.drop.addEventListener('dragleave', () => {
			if (depth > 0 && --depth === 0) els.drop.classList.remove('drop-target');
		});
		els.drop.addEventListener('dragover', (ev) => {
			if (!hasFiles(ev)) return;
			ev.preventDefault();
			ev.dataTransfer.dropEffect = 'copy';
		});
		els.drop.addEventListener('drop', (ev) => {
			depth = 0;
			els.drop.classList.remove('drop-target');
			if (!hasFiles(ev)) return;
			ev.preventDefault();
			this.add([...ev.dataTransfer.files]);
		});
	}

	/** Takes gateway.ready's "attachments" limits. */
	setLimits(l) {
		if (l && l.max_bytes > 0 && l.max_files > 0 && l.max_total > 0) this.#limits = l;
	}

	/** The chips, in order. */
	#chips() {
		return [...this.#els.chips.querySelectorAll('[data-testid="attach-chip"]')];
	}

	/** Whether a file is still uploading (the prompt waits for it). */
	busy() {
		return this.#uploads > 0;
	}

	/** Resolves once no file uploads any more. */
	async settled() {
		while (this.#inflight.size > 0) await Promise.all([...this.#inflight]);
	}

	/** The ready files, for the prompt: [{id, name, type, kind, size}]. */
	files() {
		return this.#chips()
			.filter((c) => c.dataset.state === 'ready')
			.map((c) => c._ref);
	}

	/** Says why a file or the message was refused (empty: clears it). */
	error(text) {
		this.#els.error.textContent = text ?? '';
		this.#els.error.hidden = !text;
	}

	/**
	 * The error of the message about to be sent with the ready files, in
	 * the server's words, or "" when within the limits.
	 */
	check() {
		const files = this.files();
		const l = this.#limits;
		if (files.length > l.max_files) return limitMessage('files', l.max_files, files.length);
		const total = files.reduce((n, f) => n + f.size, 0);
		if (total > l.max_total) return limitMessage('total', l.max_total, total);
		return '';
	}

	/** Uploads files into the current session, each a chip; refuses those over the limits. */
	async add(files) {
		if (files.length === 0) return;
		this.error('');
		const l = this.#limits;
		const ok = [];
		let count = this.#chips().length;
		let total = this.#chips().reduce((n, c) => n + Number(c.dataset.size || 0), 0);
		for (const f of files) {
			if (f.size > l.max_bytes) {
				this.error(limitMessage('bytes', l.max_bytes, f.size, f.name));
				continue;
			}
			if (count + 1 > l.max_files) {
				this.error(`${f.name}: ${limitMessage('files', l.max_files, count + 1)}`); // named, as the server's refusal of its upload
				continue;
			}
			if (total + f.size > l.max_total) {
				this.error(`${f.name}: ${limitMessage('total', l.max_total, total + f.size)}`);
				continue;
			}
			count++;
			total += f.size;
			ok.push(f);
		}
		if (ok.length === 0) return;
		const chips = ok.map((f) => this.#chip(f));
		this.#uploads += ok.length;
		let sid;
		try {
			sid = await this.#session();
		} catch {
			sid = null;
		}
		if (!sid) {
			this.#uploads -= ok.length;
			for (const c of chips) c.remove();
			this.#show();
			this.error('The files were not uploaded: no session to attach them to.');
			return;
		}
		for (const c of chips) c.dataset.sid = sid;
		// One after another, in the order picked: the server keeps a
		// session's files in the order their uploads end, and a reload
		// shows them (and the prompt sends them) in that order. Side by
		// side, the smaller file could end first, and a reload reorder
		// the chips.
		const all = (async () => {
			for (const [i, f] of ok.entries()) await this.#upload(sid, f, chips[i]);
		})();
		this.#inflight.add(all);
		try {
			await all;
		} finally {
			this.#inflight.delete(all);
		}
	}

	#chip(f) {
		const li = document.createElement('li');
		li.className = 'attach-chip';
		li.dataset.testid = 'attach-chip';
		li.dataset.state = 'uploading';
		li.dataset.size = String(f.size);
		const name = document.createElement('span');
		name.className = 'attach-name';
		name.textContent = f.name;
		const size = document.createElement('span');
		size.className = 'attach-size';
		size.textContent = formatBytes(f.size);
		const rm = document.createElement('button');
		rm.type = 'button';
		rm.className = 'attach-remove';
		rm.dataset.testid = 'attach-remove';
		rm.textContent = '×';
		rm.title = `Remove ${f.name}`;
		rm.setAttribute('aria-label', `Remove ${f.name}`);
		li.append(name, size, rm);
		this.#els.chips.append(li);
		this.#show();
		return li;
	}

	async #upload(sid, f, chip) {
		try {
			const res = await fetch(`${attachmentURL(this.#base, sid)}?name=${encodeURIComponent(f.name)}`, {
				method: 'POST',
				body: f,
				headers: { 'Content-Type': f.type || 'application/octet-stream' },
				credentials: 'same-origin',
			});
			const body = await res.json().catch(() => ({}));
			if (!res.ok) throw new Error(body.message || `upload failed (HTTP ${res.status})`);
			if (!chip.isConnected || (this.#sid && sid !== this.#sid)) {
				// Removed, or another session shown, while it uploaded: take it back.
				chip.remove();
				this.#show();
				fetch(attachmentURL(this.#base, sid, body.id), { method: 'DELETE', credentials: 'same-origin' }).catch(() => {});
				return;
			}
			chip._ref = body;
			chip.dataset.id = body.id;
			chip.dataset.kind = body.kind;
			chip.dataset.state = 'ready';
		} catch (err) {
			chip.remove();
			this.#show();
			this.error(err.message.startsWith(f.name) ? err.message : `${f.name}: ${err.message}`);
		} finally {
			this.#uploads--;
		}
	}

	#remove(chip) {
		if (!chip) return;
		const { id, sid } = chip.dataset;
		chip.remove();
		this.#show();
		this.error('');
		if (id && sid) {
			fetch(attachmentURL(this.#base, sid, id), { method: 'DELETE', credentials: 'same-origin' }).catch(() => {});
		}
	}

	/**
	 * Shows the files uploaded into session sid and not sent yet
	 * (session.resume's pending_attachments, [{id, name, type, kind,
	 * size}]) as ready chips, but those shown already: a reload finds its
	 * files again, as its draft.
	 */
	restore(sid, refs) {
		if (!Array.isArray(refs)) return;
		const shown = new Set(this.#chips().map((c) => c.dataset.id));
		for (const f of refs) {
			if (!f?.id || shown.has(f.id)) continue;
			const chip = this.#chip(f);
			chip._ref = f;
			chip.dataset.id = f.id;
			chip.dataset.kind = f.kind;
			chip.dataset.sid = sid;
			chip.dataset.state = 'ready';
		}
	}

	/** Empties the tray once its files were sent (they are the prompt's now). */
	sent() {
		for (const c of this.#chips()) c.remove();
		this.error('');
		this.#show();
	}

	/**
	 * The current session changed to sid: files uploaded into another one
	 * and not sent are taken back there.
	 */
	sessionChanged(sid) {
		this.#sid = sid;
		for (const c of this.#chips()) {
			if (c.dataset.state === 'ready' && c.dataset.sid !== sid) this.#remove(c);
		}
	}

	#show() {
		this.#els.chips.hidden = this.#chips().length === 0;
	}
}
