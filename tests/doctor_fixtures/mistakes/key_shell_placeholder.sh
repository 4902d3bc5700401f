# ~/.zshrc
export PATH="$HOME/bin:$PATH"
export OPENAI_API_KEY=YOUR_API_KEY
