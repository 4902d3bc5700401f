# ~/.bashrc snippet
alias ll='ls -l'
export TAOTOKEN_BASE_URL="https://taotoken.net/api"
export TAOTOKEN_API_KEY="$(pass show taotoken)"
