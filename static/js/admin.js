// The admin page's script.
//
// Refresh: the body is fetched again every 2 s (?fragment=1, the same templ
// component, with the page's own ?user= filter so a filtered page stays
// filtered) and the old one is updated in place to match it (morph.js: a
// button holding the focus stays put); the window's scroll position is kept.
//
// Reaps: a reap button asks first, in a <dialog data-testid="confirm-dialog">
// (confirm-yes / confirm-no), the question it carries in data-confirm or,
// for a session's or a worker's row (data-reap="session" | "worker": six
// hundred questions were a tenth of a loaded page), one made from its row,
// then posts with Accept: application/json and says what happened in
// data-testid="admin-result" (data-state ok|error), with the reason the log
// records. Without JavaScript the forms post as they are (303 back).
//
// Plots: the last 15 minutes of GET /admin/api/samples (sampled by the
// server every few seconds into a bounded ring), drawn with the vendored
// uPlot: live sessions, workers, their total RSS, and session closes per
// minute by end_reason; an all-zero series on a 0–5 axis. The time axis
// has one line of labels ("7:50am", ":15" between whole minutes), spaced
// wider than the widest label (uPlot's second line, the date, ran into
// its neighbours); the value axis is as wide as its widest label. Each plot
// carries data-max (its highest value) and data-y-max (its axis's top).
// The plots section carries data-samples (how many
// samples are drawn) and data-last (the newest sample, JSON) for tests.
import uPlot from '../vendor/uplot/uPlot.esm.js';
import { morphInto } from './morph.js';

const base = document.body.dataset.basePath || '/';
const everyMs = 2000;
const dialog = document.querySelector('[data-testid="confirm-dialog"]');
const question = document.querySelector('[data-testid="confirm-text"]');
const result = document.querySelector('[data-testid="admin-result"]');
let asking = false; // a question is open: the refresh waits

/** The refresh's query: fragment=1 and the page's user filter, if any (?user= is the anonymous user's). */
function fragmentQuery() {
	const q = new URLSearchParams({ fragment: '1' });
	const here = new URLSearchParams(window.location.search);
	if (here.has('user')) q.set('user', here.get('user'));
	return q.toString();
}

async function refresh() {
	const body = document.getElementById('admin-body');
	if (!body || document.hidden || asking) return;
	try {
		const res = await fetch(base + 'admin?' + fragmentQuery(), { credentials: 'same-origin', cache: 'no-store' });
		if (!res.ok || asking) return;
		const html = await res.text();
		const tpl = document.createElement('template');
		tpl.innerHTML = html.trim();
		const fresh = tpl.content.firstElementChild;
		if (!fresh) return;
		const x = window.scrollX,
			y = window.scrollY;
		morphInto(body, fresh);
		window.scrollTo(x, y);
	} catch (e) {
		console.warn('admin refresh failed', e);
	}
}

/** Asks question in the dialog; resolves true when confirmed. */
function confirmAction(text) {
	question.textContent = text;
	asking = true;
	dialog.returnValue = '';
	dialog.showModal();
	return new Promise((resolve) => {
		dialog.addEventListener(
			'close',
			() => {
				asking = false;
				resolve(dialog.returnValue === 'ok');
			},
			{ once: true },
		);
	});
}

function show(state, text) {
	result.hidden = false;
	result.dataset.state = state;
	result.textContent = text;
}

/** What a reap's JSON answer means, in words, with the logged reason. */
function describe(form, status, body) {
	const action = (form.getAttribute('action') ?? '').split('?')[0]; // without the ?user= filter
	if (status === 404 || body?.reaped === false) {
		if (/reap-detached$/.test(action)) return ['ok', 'No detached session to reap.'];
		return ['error', `Nothing reaped: ${body?.error ?? 'not found'} (it may have ended already).`];
	}
	if (body?.forwarded) {
		// Another node holds it: that node reaps it and logs the records.
		return ['ok', `Sent to node ${body.node}, which holds it: it reaps it there (its log names you, by=).`];
	}
	if (/reap-detached$/.test(action)) {
		const n = Number(body?.count ?? 0);
		return ['ok', `Reaped ${n} detached session${n === 1 ? '' : 's'} (logged as "session closed", end_reason=${body?.end_reason ?? 'admin_reap'}).`];
	}
	let m = /users\/([^/]*)\/reap$/.exec(action);
	if (m) {
		const n = Number(body?.count ?? 0);
		const who = decodeURIComponent(m[1]) || '(anonymous)';
		return ['ok', `Reaped ${n} session${n === 1 ? '' : 's'} of ${who} (each logged as "session closed", end_reason=${body?.end_reason ?? 'admin_reap'}).`];
	}
	m = /sessions\/([^/]+)\/reap$/.exec(action);
	if (m) return ['ok', `Reaped session ${decodeURIComponent(m[1])} (logged as "session closed", end_reason=${body?.end_reason ?? 'admin_reap'}).`];
	m = /workers\/(\d+)\/reap$/.exec(action);
	if (m && body?.reason) return ['ok', `Reaped process ${m[1]} and its tree (logged as "worker closed", reason=${body.reason}).`];
	return ['ok', `Reaped process ${m ? m[1] : ''} (an unowned process, killed with its process group).`];
}

/** The question a reap button asks: its data-confirm, or one made from its row (data-reap); '' for none. */
function questionOf(button) {
	if (button.dataset.confirm) return button.dataset.confirm;
	const row = button.closest('tr');
	if (!row) return '';
	if (button.dataset.reap === 'session') {
		const id = row.dataset.sessionId;
		const cell = row.querySelector('[data-testid="session-title"]');
		const title = cell && !cell.classList.contains('none') ? cell.textContent : ''; // .none: hidden from this admin
		return `Reap session ${title ? `${JSON.stringify(title)} (${id})` : id}? Its worker and terminal end; the conversation is kept.`;
	}
	if (button.dataset.reap === 'worker') {
		const what = row.dataset.kind === 'pty' ? 'terminal' : 'worker';
		return `Reap ${what} ${row.dataset.pid}? Its whole process tree ends; its session stays.`;
	}
	return '';
}

document.addEventListener('submit', async (ev) => {
	const form = ev.target;
	const button = ev.submitter ?? form.querySelector('button[data-confirm], button[data-reap]');
	const text = button ? questionOf(button) : '';
	if (!text) return;
	ev.preventDefault();
	if (!(await confirmAction(text))) {
		show('cancelled', 'Cancelled: nothing was reaped.');
		return;
	}
	show('pending', 'Reaping…');
	try {
		const res = await fetch(form.action, { method: 'POST', credentials: 'same-origin', headers: { Accept: 'application/json' } });
		let body = null;
		try {
			body = await res.json();
		} catch {
			body = null;
		}
		if (!res.ok && res.status !== 404) {
			show('error', `Reap failed: HTTP ${res.status}.`);
		} else {
			show(...describe(form, res.status, body));
		}
	} catch (e) {
		show('error', `Reap failed: ${e.message}.`);
	}
	refresh();
});

const plotsEl = document.querySelector('[data-testid="plots"]');
const plots = {}; // name -> {u: uPlot, key: the series' labels}
const COLORS = ['#5fa8d3', '#e5a54b', '#9fe0b4', '#f07178', '#c792ea', '#82aaff', '#ffcb6b', '#89ddff'];
// An all-zero (or empty) series gets a small fixed axis, 0 to ZERO_MAX,
// not uPlot's 0–100 for a flat line at 0; any other gets uPlot's own range.
const ZERO_MAX = 5;
const Y_RANGE = (u, min, max) => (min == null || (max <= 0 && min >= 0) ? [0, ZERO_MAX] : uPlot.rangeNum(min, max, 0.1, true));
// uPlot's own axis font, named so that labels can be measured in it.
const FONT = '12px system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, "Noto Sans", sans-serif';
const measure = document.createElement('canvas').getContext('2d');
function textWidth(s) {
	measure.font = FONT;
	return Math.ceil(measure.measureText(s).width);
}
const AXIS = { font: FONT, stroke: '#7b8594', grid: { stroke: '#2a3140', width: 1 }, ticks: { stroke: '#2a3140', width: 1 } };
const HM = uPlot.fmtDate('{h}:{mm}{aa}');
const SS = uPlot.fmtDate(':{ss}');
/** A time tick's label: ":15" between whole minutes when ticks are seconds apart, else "7:50am". */
function timeLabel(t, incr) {
	const d = new Date(t * 1000);
	return incr < 60 && d.getSeconds() !== 0 ? SS(d) : HM(d);
}
const X_AXIS = {
	...AXIS,
	size: 32,
	space: textWidth('12:59pm') + 16, // ticks the widest label and a gap apart
	values: (u, splits, axis, space, incr) => splits.map((t) => (t == null ? null : timeLabel(t, incr))),
};
// The tick, the gap, the widest label and a margin (uPlot sizes an axis
// before its labels are known, then again with them).
const Y_AXIS = { ...AXIS, size: (u, values) => 10 + 5 + Math.max(24, ...(values ?? []).map((v) => textWidth(String(v ?? '')))) + 4 };

function plot(name, labels, data) {
	const el = document.querySelector(`[data-testid="plot-${name}"]`);
	if (!el) return;
	const key = labels.join('\u0000');
	el.dataset.max = String(Math.max(0, ...data.slice(1).flat())); // the highest value shown (tests read it)
	const width = Math.max(200, el.clientWidth - 16);
	let p = plots[name];
	if (p && p.key !== key) {
		p.u.destroy();
		p = null;
	}
	if (!p) {
		const u = new uPlot(
			{
				width,
				height: 130,
				cursor: { drag: { x: false, y: false } },
				scales: { x: { time: true }, y: { range: Y_RANGE } },
				// The y axis's top, for tests.
				hooks: { setScale: [(u, key) => key === 'y' && (el.dataset.yMax = String(u.scales.y.max))] },
				axes: [X_AXIS, Y_AXIS],
				series: [{}, ...labels.map((label, i) => ({ label, stroke: COLORS[i % COLORS.length], width: 1.5, points: { show: false } }))],
			},
			data,
			el,
		);
		plots[name] = p = { u, key };
	} else {
		p.u.setData(data);
		if (Math.abs(p.u.width - width) > 4) p.u.setSize({ width, height: 130 });
	}
}

async function drawPlots() {
	if (!plotsEl || document.hidden) return;
	let body;
	try {
		const res = await fetch(base + 'admin/api/samples', { credentials: 'same-origin', cache: 'no-store' });
		if (!res.ok) return;
		body = await res.json();
	} catch (e) {
		console.warn('admin samples failed', e);
		return;
	}
	const samples = Array.isArray(body.samples) ? body.samples : [];
	const t = samples.map((s) => Date.parse(s.t) / 1000);
	// Closes in the minute up to each sample: a rolling sum of the samples'
	// counts (each counts the closes since the sample before).
	const lastMinute = (reason) => samples.map((_, i) => {
		let n = 0;
		for (let j = i; j >= 0 && t[i] - t[j] < 60; j--) n += samples[j].closes?.[reason] ?? 0;
		return n;
	});
	plot('sessions', ['sessions'], [t, samples.map((s) => s.sessions)]);
	plot('workers', ['workers'], [t, samples.map((s) => s.workers)]);
	plot('rss', ['MiB'], [t, samples.map((s) => Math.round(((s.rss_bytes ?? 0) / 1048576) * 10) / 10)]);
	const reasons = [...new Set(samples.flatMap((s) => Object.keys(s.closes ?? {})))].sort();
	const closes = reasons.length ? reasons : ['closes'];
	plot('closes', closes, [t, ...closes.map(lastMinute)]);
	plotsEl.dataset.samples = String(samples.length);
	plotsEl.dataset.last = samples.length ? JSON.stringify(samples[samples.length - 1]) : '';
	document.querySelector('[data-testid="plots-empty"]').hidden = samples.length > 0;
}

drawPlots();
setInterval(drawPlots, 5000);
setInterval(refresh, everyMs);
