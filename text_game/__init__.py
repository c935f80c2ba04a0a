"""What the text games share: the language-feedback contract (:mod:`text_game.llf`) that
``text_crafter.llf`` and ``text_housekeep.llf`` implement and ``llm_in_the_loop`` plays.

A package of its own so that neither game imports the other, and both stay free of LLM and RL
code: the contract is gymnasium and the standard library only (and LLF-Bench's wrapper class,
where LLF-Bench is installed: ``text_game.llf_bench``, chosen by ``text_game.registration``). It
is not part of ``llm_in_the_loop`` (an LLM package the games must not import) nor of ``ellm``
(the method).
Also here: :class:`text_game.image_only.ImageOnly`, a training env's pixels alone, for RL
libraries such as Stable-Baselines3, and :mod:`text_game.stats`, the episode records every game's
runs write (Crafter's ``stats.jsonl``).
"""
