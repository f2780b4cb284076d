// dashgate: a terminal recording's page (templates/recordings.templ). It
// plays the asciicast file named by the player element's data-src with the
// vendored asciinema player (static/vendor/asciinema: the global
// AsciinemaPlayer, loaded by the page before this module). The page's CSP
// lets the player compile its WebAssembly and nothing more
// (handlers/recordings.go playerCSP).

const el = document.querySelector('[data-testid="player"]');
const error = document.querySelector('[data-testid="player-error"]');

function fail(message) {
	if (!error) return;
	error.textContent = message;
	error.hidden = false;
}

if (!el) {
	// not a player page
} else if (!window.AsciinemaPlayer) {
	fail('The player could not be loaded; the recording can still be downloaded.');
} else {
	const player = window.AsciinemaPlayer.create(el.dataset.src, el, {
		autoPlay: true,
		preload: true,
		// Within the page's width and the window's height (.player's
		// height): a tall recording's controls were below the fold.
		fit: 'both',
		// Long pauses (a shell waiting for its user) play as a second.
		idleTimeLimit: 1,
		terminalFontFamily: 'ui-monospace, "DejaVu Sans Mono", Menlo, Consolas, "Liberation Mono", monospace',
	});
	el.dataset.state = 'loading';
	player.addEventListener('playing', () => (el.dataset.state = 'playing'));
	player.addEventListener('pause', () => (el.dataset.state = 'paused'));
	player.addEventListener('ended', () => (el.dataset.state = 'ended'));
	// For tests and the curious: the player's API (seek, play, getDuration).
	window.dashgatePlayer = player;
}
