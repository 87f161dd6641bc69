ls -la /srv/shop
git -C /srv/shop log -n 3
sudo systemctl restart shop-web
