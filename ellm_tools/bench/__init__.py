"""The benchmarks: each measures one part of the project, in one sitting, and prints it
(README.md, "Benchmarks"). They import the method and the games; nothing imports them."""
