"""The pure core: settings, the choice model, the rules and the files. Imports only the standard
library (and python-dotenv, in ``envfile``, when an env file is read)."""
