"""Process start-up: ``edgeopt serve`` from a bundle (or several) to a running app, and a server as a child process."""
