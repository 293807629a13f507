"""The command line: the `specplan` entry point and one module per subcommand. The top floor:
nothing in sim/, profiler/ or dashboard/ imports it."""
